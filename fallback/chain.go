package fallback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// HeaderDegraded is the header every response served by a fallback step
// carries, with the value Degraded(step, reason).
const HeaderDegraded = "X-Switchboard-Degraded"

// Degraded is the value of HeaderDegraded: "<step>: <reason>", for example
// "stale: breaker_open" or "static: status:503".
func Degraded(step, reason string) string { return step + ": " + reason }

// StatusReason is the reason for a chain triggered by an upstream status,
// in the syntax of the "on:" list: "status:503".
func StatusReason(status int) string { return "status:" + strconv.Itoa(status) }

// Sender sends a request to an upstream by name. The proxy implements it
// for backup steps.
type Sender interface {
	Send(ctx context.Context, upstream string, req *http.Request) (*http.Response, error)
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, upstream string, req *http.Request) (*http.Response, error)

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, upstream string, req *http.Request) (*http.Response, error) {
	return f(ctx, upstream, req)
}

// ErrNoStale is the stale step's error when nothing young enough is stored.
var ErrNoStale = errors.New("no stored response younger than max_age")

// Chain is a built, validated fallback: block. It is safe for concurrent
// use.
type Chain struct {
	triggers Triggers
	steps    []step
	cache    *Cache
	sender   Sender
}

type step struct {
	cfg    StepConfig
	header http.Header // static
	body   []byte      // static
}

// New validates cfg, reads static body files and returns the chain. sender
// serves backup steps (it may be nil when there are none). The stale steps
// share one Cache with cfg.Cache's limits.
func New(cfg Config, sender Sender) (*Chain, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	triggers, _ := ParseTriggers(cfg.On) // Validate checked each entry
	c := &Chain{triggers: triggers, sender: sender}
	for i, sc := range cfg.Steps {
		s := step{cfg: sc}
		switch sc.Type {
		case StepBackup:
			if sender == nil {
				return nil, fmt.Errorf("fallback: steps[%d]: backup %q needs a Sender", i, sc.Upstream)
			}
		case StepStale:
			if c.cache == nil {
				c.cache = NewCache(cfg.Cache)
			}
		case StepStatic:
			s.header = make(http.Header, len(sc.Headers))
			for k, v := range sc.Headers {
				s.header.Set(k, v)
			}
			s.body = []byte(sc.Body)
			if sc.BodyFile != "" {
				b, err := os.ReadFile(sc.BodyFile)
				if err != nil {
					return nil, fmt.Errorf("fallback: steps[%d].body_file: %w", i, err)
				}
				s.body = b
			}
		}
		c.steps = append(c.steps, s)
	}
	return c, nil
}

// Triggers returns what starts the chain.
func (c *Chain) Triggers() Triggers { return c.triggers }

// Cache returns the stale steps' cache, or nil when there is no stale step.
func (c *Chain) Cache() *Cache { return c.cache }

// Store records a good response for the stale steps (a no-op without one).
// The proxy calls it for each good response of the route, keyed like Serve.
func (c *Chain) Store(key string, status int, header http.Header, body []byte, now time.Time) bool {
	if c.cache == nil {
		return false
	}
	return c.cache.Store(key, status, header, body, now)
}

// Serve tries the steps in order for req (key is its cache key, reason why
// the chain was triggered: a Trigger's String or StatusReason) and returns
// the first response with the name of the step that served it. The response
// carries HeaderDegraded. When every step fails the errors are joined.
//
// A backup response whose status itself triggers the chain counts as a
// failure: its body is closed and the next step is tried.
func (c *Chain) Serve(ctx context.Context, req *http.Request, key, reason string, now time.Time) (*http.Response, string, error) {
	steps := make([]Step[*http.Response], len(c.steps))
	for i := range c.steps {
		s := &c.steps[i]
		steps[i] = Step[*http.Response]{Name: s.cfg.Type, Run: func(ctx context.Context) (*http.Response, error) {
			return c.run(ctx, s, req, key, now)
		}}
	}
	resp, name, err := First(ctx, steps...)
	if err != nil {
		return nil, "", err
	}
	resp.Header.Set(HeaderDegraded, Degraded(name, reason))
	return resp, name, nil
}

func (c *Chain) run(ctx context.Context, s *step, req *http.Request, key string, now time.Time) (*http.Response, error) {
	switch s.cfg.Type {
	case StepBackup:
		resp, err := c.sender.Send(ctx, s.cfg.Upstream, req)
		if err != nil {
			return nil, fmt.Errorf("upstream %q: %w", s.cfg.Upstream, err)
		}
		if c.triggers.OnStatus(resp.StatusCode) {
			resp.Body.Close()
			return nil, fmt.Errorf("upstream %q answered %d", s.cfg.Upstream, resp.StatusCode)
		}
		if resp.Header == nil {
			resp.Header = make(http.Header)
		}
		return resp, nil
	case StepStale:
		e, ok := c.cache.Get(key, s.cfg.MaxAge, now)
		if !ok {
			return nil, ErrNoStale
		}
		h := e.Header.Clone()
		if h == nil {
			h = make(http.Header)
		}
		h.Set("Age", strconv.FormatInt(int64(now.Sub(e.Stored)/time.Second), 10))
		return response(req, e.Status, h, e.Body), nil
	case StepStatic:
		return response(req, s.cfg.Status, s.header.Clone(), s.body), nil
	}
	return nil, fmt.Errorf("step type %q is unknown", s.cfg.Type) // New rejects it
}

func response(req *http.Request, status int, h http.Header, body []byte) *http.Response {
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
