package registryd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/health"
)

// defaultCheckTimeout is Consul's default Timeout of HTTP and TCP checks.
const defaultCheckTimeout = 10 * time.Second

// defaultMinInterval is Consul's minimum check interval: shorter intervals
// are raised to it ("checks.MinInterval").
const defaultMinInterval = time.Second

// runCheck runs an HTTP or TCP check every Interval until ctx ends (the
// check is removed or the server closes). The first run is immediate, so a
// fresh registration gets a verdict at once rather than after an interval.
func (s *Server) runCheck(ctx context.Context, c *checkState) {
	defer s.wg.Done()
	s.runners.Add(1)
	defer s.runners.Add(-1)
	interval := max(time.Duration(c.def.Interval), s.minInterval)
	timeout := time.Duration(c.def.Timeout)
	if timeout <= 0 {
		timeout = defaultCheckTimeout
	}
	var client *http.Client
	if c.def.Type == typeHTTP {
		client = checkHTTPClient(c.def)
		defer client.CloseIdleConnections()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		var status, output string
		if c.def.Type == typeHTTP {
			status, output = probeHTTP(pctx, client, c.def)
		} else {
			status, output = probeTCP(pctx, c.def.TCP)
		}
		cancel()
		if ctx.Err() != nil {
			return // removed while probing: the result is moot
		}
		s.mu.Lock()
		s.setStatusLocked(c, status, output)
		s.mu.Unlock()
		t.Reset(interval)
	}
}

func checkHTTPClient(def checkDef) *http.Client {
	tr := &http.Transport{
		Proxy:              nil, // a health check talks to the service, never via a proxy
		DialContext:        (&net.Dialer{}).DialContext,
		DisableKeepAlives:  true,
		DisableCompression: true,
		TLSClientConfig: &tls.Config{
			ServerName:         def.TLSServerName,
			InsecureSkipVerify: def.TLSSkipVerify, // the registrant asked for it (Consul's TLSSkipVerify)
		},
	}
	c := &http.Client{Transport: tr}
	if def.DisableRedirects {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}

// probeHTTP judges one request the way Consul does (Consul docs, checks:
// "HTTP ... 2xx is passing, 429 Too Many Requests is warning, anything else
// is critical"); the output quotes the status and up to maxOutput bytes of
// the body. It is not health.HTTPCheck, the proxy's probe of a host:port
// with configurable status ranges: a Consul check names a full URL (https
// too) and has Consul's fixed verdicts.
func probeHTTP(ctx context.Context, client *http.Client, def checkDef) (status, output string) {
	method := def.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if def.Body != "" {
		body = strings.NewReader(def.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, def.HTTP, body)
	if err != nil {
		return statusCritical, fmt.Sprintf("HTTP %s %s: %v", method, def.HTTP, err)
	}
	for k, vs := range def.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "Consul Health Check (switchboard registryd)")
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return statusCritical, fmt.Sprintf("HTTP %s %s: timed out", method, def.HTTP)
		}
		return statusCritical, fmt.Sprintf("HTTP %s %s: %v", method, def.HTTP, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	output = fmt.Sprintf("HTTP %s %s: %s Output: %s", method, def.HTTP, resp.Status, b)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		return statusPassing, output
	case resp.StatusCode == http.StatusTooManyRequests:
		return statusWarning, output
	default:
		return statusCritical, output
	}
}

// probeTCP is Consul's TCP check: passing when a connection opens. It uses
// the health package's TCPCheck, the proxy's own.
func probeTCP(ctx context.Context, addr string) (status, output string) {
	if err := (health.TCPCheck{}).Check(ctx, addr); err != nil {
		return statusCritical, fmt.Sprintf("dial tcp %s: %v", addr, err)
	}
	return statusPassing, fmt.Sprintf("TCP connect %s: Success", addr)
}
