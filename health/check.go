package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Checker probes one endpoint once. It returns nil when the endpoint passes.
// Check must return promptly when ctx is done: the Monitor gives every check
// its own deadline so that a hung endpoint never delays the others.
type Checker interface {
	Check(ctx context.Context, addr string) error
}

// CheckerFunc adapts a function to the Checker interface.
type CheckerFunc func(ctx context.Context, addr string) error

// Check calls f(ctx, addr).
func (f CheckerFunc) Check(ctx context.Context, addr string) error { return f(ctx, addr) }

// MaxBodyRead caps how much of a response body HTTPCheck reads when looking
// for its expected substring; a backend streaming a large page must not cost
// the checker more than this.
const MaxBodyRead = 64 << 10

// DefaultExpectStatus is the status range an HTTPCheck expects when Expect is
// empty. 3xx passes because checks never follow redirects: a redirect proves
// the server answered.
const DefaultExpectStatus = "200-399"

var defaultExpect = mustParseStatusRanges(DefaultExpectStatus)

// HTTPCheck passes when a request to the endpoint answers with an expected
// status and, if Body is set, a body containing Body. It never follows
// redirects and never uses an environment proxy. The zero value (GET /,
// 200-399) is ready to use; a HTTPCheck must not be copied after first use.
type HTTPCheck struct {
	// Method is the request method; empty means GET.
	Method string
	// Path is the request path with optional query; empty means "/".
	Path string
	// Host is the Host header to send; empty means the endpoint address.
	Host string
	// Expect holds the passing status codes; nil means 200-399.
	Expect StatusRanges
	// Body, when set, must occur in the first MaxBodyRead bytes of the
	// response body.
	Body string
	// TLS, when set, sends the request over https with it (ServerName
	// empty: the endpoint's host).
	TLS *tls.Config

	once   sync.Once
	client *http.Client
}

func (h *HTTPCheck) init() {
	h.once.Do(func() {
		h.client = &http.Client{
			// A check is one request per interval: a pooled connection would
			// outlive the endpoint and could hide a listener that stopped
			// accepting new connections.
			Transport: &http.Transport{
				Proxy:              nil,
				DisableKeepAlives:  true,
				DisableCompression: true,
				DialContext:        (&net.Dialer{}).DialContext,
				TLSClientConfig:    checkTLS(h.TLS),
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	})
}

// Check sends one request to addr (host:port) and judges the response.
func (h *HTTPCheck) Check(ctx context.Context, addr string) error {
	h.init()
	method := h.Method
	if method == "" {
		method = http.MethodGet
	}
	path := h.Path
	if path == "" {
		path = "/"
	} else if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme(h.TLS)+addr+path, nil)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if h.Host != "" {
		req.Host = h.Host
	}
	req.Header.Set("User-Agent", "switchboard-health/1")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	expect := h.Expect
	if expect == nil {
		expect = defaultExpect
	}
	if !expect.Contains(resp.StatusCode) {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if h.Body == "" {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyRead))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if !strings.Contains(string(b), h.Body) {
		return fmt.Errorf("body does not contain %q in its first %d bytes", h.Body, len(b))
	}
	return nil
}

// TCPCheck passes when a TCP connection to the endpoint can be opened;
// with TLS set, when a TLS handshake with it completes on the connection.
type TCPCheck struct {
	// TLS, when set, is the handshake's configuration (ServerName empty:
	// the endpoint's host).
	TLS *tls.Config
}

// Check connects to addr and closes the connection at once.
func (t TCPCheck) Check(ctx context.Context, addr string) error {
	if t.TLS != nil {
		return tlsHandshakeCheck(ctx, t.TLS, addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// StatusRanges is a set of HTTP status codes, written as comma-separated
// codes and inclusive ranges: "200-399", "200,204,300-308".
type StatusRanges []StatusRange

// StatusRange is an inclusive range of HTTP status codes.
type StatusRange struct{ Lo, Hi int }

// ParseStatusRanges parses the written form of StatusRanges.
func ParseStatusRanges(s string) (StatusRanges, error) {
	var rs StatusRanges
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		l, err := parseStatus(lo)
		if err != nil {
			return nil, fmt.Errorf("status range %q: %w", part, err)
		}
		h := l
		if isRange {
			if h, err = parseStatus(hi); err != nil {
				return nil, fmt.Errorf("status range %q: %w", part, err)
			}
		}
		if h < l {
			return nil, fmt.Errorf("status range %q: end below start", part)
		}
		rs = append(rs, StatusRange{l, h})
	}
	if len(rs) == 0 {
		return nil, errors.New("status ranges: empty")
	}
	return rs, nil
}

func mustParseStatusRanges(s string) StatusRanges {
	rs, err := ParseStatusRanges(s)
	if err != nil {
		panic(err)
	}
	return rs
}

func parseStatus(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 100 || n > 599 {
		return 0, fmt.Errorf("%q is not a status code (100-599)", s)
	}
	return n, nil
}

// Contains reports whether code is in one of the ranges.
func (rs StatusRanges) Contains(code int) bool {
	for _, r := range rs {
		if code >= r.Lo && code <= r.Hi {
			return true
		}
	}
	return false
}

func (rs StatusRanges) String() string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r.Lo == r.Hi {
			parts[i] = strconv.Itoa(r.Lo)
		} else {
			parts[i] = strconv.Itoa(r.Lo) + "-" + strconv.Itoa(r.Hi)
		}
	}
	return strings.Join(parts, ",")
}

// checkKind names a checker in verdict reasons ("3 consecutive HTTP check
// failures").
func checkKind(c Checker) string {
	switch c.(type) {
	case *HTTPCheck:
		return "HTTP"
	case TCPCheck, *TCPCheck:
		return "TCP"
	case *GRPCCheck:
		return "gRPC"
	}
	return "health"
}
