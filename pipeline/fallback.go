package pipeline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
)

// degrade answers c through the route's fallback chain for the given
// trigger. It reports false when there is no chain for it or every step
// failed.
func (r *Route) degrade(c *Call, trigger fallback.Trigger, reason string) (*http.Response, bool) {
	// A status trigger was checked by the caller (Triggers.OnStatus).
	if r.fb == nil || (trigger != fallback.StatusCode && !r.fb.Triggers().On(trigger)) {
		return nil, false
	}
	resp, step, err := r.fb.Serve(c.Req.Context(), c.Req, cacheKey(c.Req), reason, time.Now())
	if err != nil {
		r.log.Debug("fallback chain failed", "route", r.name, "reason", reason, "error", err)
		return nil, false
	}
	r.m.fellBack(r.name, step, reason)
	c.degraded = true
	return resp, true
}

// cacheKey is the stale cache's key for a request.
func cacheKey(r *http.Request) string { return r.Method + " " + r.Host + r.URL.RequestURI() }

// sendBackup sends a body-less copy of req to one endpoint of the named
// upstream (a backup step).
func (r *Route) sendBackup(ctx context.Context, name string, req *http.Request) (*http.Response, error) {
	if r.backups == nil {
		return nil, errors.New("no upstream " + name)
	}
	up, t, ok := r.backups(name)
	if !ok {
		return nil, errors.New("no upstream " + name)
	}
	var info balance.Info
	pick, err := up.Pick(&info)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	resp, err := t.RoundTrip(ctx, time.Time{}, pick.Endpoint, &Call{Req: req}, nil)
	if err != nil {
		pick.Done(endpoint.Outcome{Err: err, Latency: time.Since(t0)})
		return nil, err
	}
	pick.Done(endpoint.Outcome{Status: resp.StatusCode, Latency: time.Since(t0)})
	return resp, nil
}

// staleRecorder is a good response's body, teed for the stale step up to
// max bytes; past that it gives up. Finish stores what it recorded if the
// body was read to its end.
type staleRecorder struct {
	body   io.ReadCloser
	header http.Header
	buf    bytes.Buffer
	max    int64
	over   bool
	eof    bool
}

func (s *staleRecorder) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if n > 0 && !s.over {
		if int64(s.buf.Len()+n) > s.max {
			s.over = true
			s.buf = bytes.Buffer{}
		} else {
			s.buf.Write(p[:n])
		}
	}
	if err == io.EOF {
		s.eof = true
	}
	return n, err
}

func (s *staleRecorder) Close() error { return s.body.Close() }
