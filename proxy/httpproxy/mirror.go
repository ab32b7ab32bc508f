package httpproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/pipeline"
)

// HeaderMirror marks a mirrored copy of a request ("1"), so that the
// shadow upstream can tell copies from real traffic. The copy's Host is
// the original's.
const HeaderMirror = "X-Switchboard-Mirror"

// mirrorDiscardMax is how much of a copy's response is read (and thrown
// away) so that its connection can be kept; a longer one is cut.
const mirrorDiscardMax = 1 << 20

// mirror sends copies of a share of a route's requests to another upstream,
// in goroutines of their own, and throws their answers away. Nothing it
// does waits on the copy: the primary request goes on at once.
type mirror struct {
	pipe     *pipeline.Route
	share    uint64 // of 1<<32 requests copied
	maxBody  int64
	max      int64
	inflight atomic.Int64
	timeout  time.Duration
	ts       *trafficState
	// sent, failed, dropped, skipped; nil series count nothing.
	results [4]prometheus.Counter
}

const (
	mirrorSent = iota
	mirrorFailed
	mirrorDropped
	mirrorSkipped
)

// newMirror returns the mirror mc of route, sending through pipe; a copy
// gets timeout (0: mirrorTimeout).
func newMirror(route string, mc *config.Mirror, pipe *pipeline.Route, timeout time.Duration, ts *trafficState) *mirror {
	if timeout <= 0 {
		timeout = mirrorTimeout
	}
	m := &mirror{pipe: pipe, maxBody: int64(mc.MaxBody), max: int64(mc.MaxConcurrency), ts: ts, timeout: timeout}
	pct := mc.Percent
	if pct == 0 {
		pct = config.DefaultMirrorPercent
	}
	m.share = uint64(pct / 100 * (1 << 32))
	if m.max == 0 {
		m.max = config.DefaultMirrorMaxConcurrency
	}
	if ts.m != nil {
		for i, res := range [4]string{"sent", "failed", "dropped", "skipped"} {
			m.results[i] = ts.m.mirrors.WithLabelValues(route, pipe.Upstream().Name(), res)
		}
	}
	return m
}

func (m *mirror) count(res int) {
	if c := m.results[res]; c != nil {
		c.Inc()
	}
}

// mirrorCopy is one request chosen for copying: the copy's request, and
// its body as the primary reads it.
type mirrorCopy struct {
	m    *mirror
	req  *http.Request
	tee  *teeBody // nil: the body is in body already, or there is none
	body []byte
	skip bool // the body cannot be copied
}

// begin decides whether c, the call of request r about to be sent, is
// copied, and if so prepares the copy: its header (as it goes upstream,
// marked), and its body, teed from the primary's as the primary reads it.
// nil when r is not copied.
func (m *mirror) begin(r *http.Request, c *pipeline.Call) *mirrorCopy {
	if m.share < 1<<32 && rand.Uint64N(1<<32) >= m.share {
		return nil
	}
	mc := &mirrorCopy{m: m}
	if c.Upgrade != "" {
		mc.skip = true // a tunnel is not copied
		return mc
	}
	if c.Body != nil {
		n := r.ContentLength
		if n < 0 || n > m.maxBody {
			mc.skip = true
			return mc
		}
		if bb, ok := c.Body.(pipeline.BufferedBody); ok {
			// Held whole by the front end: copied now, since it is closed
			// when the primary is done.
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, io.LimitReader(bb.NewReader(), n+1)); err != nil || int64(buf.Len()) != n {
				mc.skip = true
				return mc
			}
			mc.body = buf.Bytes()
		} else {
			mc.tee = &teeBody{r: c.Body, want: n}
			c.Body = mc.tee
		}
	}
	h := r.Header.Clone()
	h[HeaderMirror] = []string{"1"}
	u := *r.URL
	mc.req = &http.Request{Method: r.Method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Host: r.Host, RemoteAddr: r.RemoteAddr, RequestURI: r.RequestURI}
	return mc
}

// send sends the copy, once the primary's Do has returned with err: in a
// goroutine, unless it is skipped (its body was not read whole, or the
// primary was refused by a limit: a mirror does not add load the route is
// shedding) or over max_concurrency (dropped).
func (mc *mirrorCopy) send(err error) {
	m := mc.m
	if mc.skip || refused(err) {
		m.count(mirrorSkipped)
		return
	}
	if mc.tee != nil {
		if !mc.tee.complete.Load() {
			m.count(mirrorSkipped)
			return
		}
		mc.body = mc.tee.buf
	}
	if m.inflight.Add(1) > m.max {
		m.inflight.Add(-1)
		m.count(mirrorDropped)
		return
	}
	if !m.ts.enter() {
		m.inflight.Add(-1)
		m.count(mirrorDropped)
		return
	}
	go func() {
		defer m.ts.wg.Done()
		defer m.inflight.Add(-1)
		if mc.run() {
			m.count(mirrorSent)
		} else {
			m.count(mirrorFailed)
		}
	}()
}

// refused reports whether the primary was refused before it was sent:
// by a limit, or for the request's own fault.
func refused(err error) bool {
	var pe *pipeline.Error
	if err == nil || !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case pipeline.CodeRateLimited, pipeline.CodeConcurrencyLimited, pipeline.CodeBadRequest,
		pipeline.CodeRequestTimeout, pipeline.CodeClientClosed, pipeline.CodeHashKeyMissing, pipeline.CodeBodyTooLarge:
		return true
	}
	return false
}

// run sends the copy through the mirror's pipeline and reads its answer
// away; it reports whether an answer came.
func (mc *mirrorCopy) run() bool {
	ctx, cancel := context.WithTimeout(mc.m.ts.ctx, mc.m.timeout)
	defer cancel()
	req := mc.req.WithContext(ctx)
	c := &pipeline.Call{Req: req}
	req.ContentLength = int64(len(mc.body))
	if len(mc.body) > 0 {
		c.Body = bytes.NewReader(mc.body)
	}
	status := http.StatusBadGateway
	var bodyErr error
	defer func() { c.Finish(status, bodyErr) }()
	resp, err := mc.m.pipe.Do(c, time.Now())
	if err != nil {
		var pe *pipeline.Error
		if errors.As(err, &pe) {
			status = pe.Status
		}
		return false
	}
	status = resp.StatusCode
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, mirrorDiscardMax)); err != nil {
		bodyErr = err
	}
	resp.Body.Close()
	return true
}

// teeBody keeps a copy of the body the primary reads, up to want bytes,
// and marks complete once all of it was read. buf is not written after
// that, so a reader that saw complete may read it. buf grows as the body
// comes, not to want at once: a client declaring a Content-Length and
// then trickling must not hold that much memory per request.
type teeBody struct {
	r        io.Reader
	buf      []byte
	want     int64
	complete atomic.Bool
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 && !t.complete.Load() {
		k := min(int64(n), t.want-int64(len(t.buf)))
		t.buf = append(t.buf, p[:k]...)
		if int64(len(t.buf)) == t.want {
			t.complete.Store(true)
		}
	}
	return n, err
}
