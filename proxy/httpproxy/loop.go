package httpproxy

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/h1loop"
)

// loopHandler is a listener's Handler as the event-loop engine
// (proxy/h1loop) sees it. It serves on the loop what it can serve exactly
// as ServeHTTP would, and nothing else: a request whose listener or route
// uses a feature the loop does not implement (tracing, HSTS,
// redirect_https, a client certificate header, ACME challenges, access
// control, redirects, rewrites, compression, buffered bodies, splits and
// mirrors, sticky sessions, a stale fallback), one that matches no route or needs a 400 or
// 413, and one whose upstream is not cleartext HTTP/1.1 goes to the
// goroutine engine (Begin returns nil).
//
// The access log's lines are made on the loop and written by the
// listener's accessQueue, off the loop.
type loopHandler struct {
	h   *Handler
	log *accessQueue
}

// loopExchange is one request served on a loop. A connection's requests
// reuse one (Begin's prev).
type loopExchange struct {
	st    reqState
	t     *Table
	tg    *target
	rt    *route
	tr    *Transport
	start time.Time
	h     *Handler
	// log is the listener's access log queue when the access log is on
	// (then the exchange observes its attempts' time to the response head
	// and the degraded reason it answers with), else nil.
	log      *accessQueue
	ttfb     time.Duration
	degraded string
	answer   int64 // the body bytes of the proxy's own answer (Fail)
	// ids is where the request ids this exchange's requests make are
	// written (see idSpace), ids[0] the next.
	ids [][32]byte
}

// idSpace is how many request ids an exchange makes in one allocation. A
// made id is a string over bytes written once and never again (the
// state that made it is reused by the connection's next request, the
// bytes are not): the access log, a limiter's key or a span may keep it.
const idSpace = 64

// Begin implements h1loop.Handler.
func (lh loopHandler) Begin(r *http.Request, now time.Time, prev h1loop.Exchange) h1loop.Exchange {
	h := lh.h
	if h.acmeHTTP.Load() != nil {
		return nil
	}
	t := h.tbl.Load()
	if t.tracer != nil || t.front != nil {
		return nil
	}
	if t.maxBody > 0 && r.ContentLength > t.maxBody {
		return nil
	}
	// As ServeHTTP, before routing reads the header. (A request handed off
	// is parsed again from its bytes.)
	scrubRequestHeader(r.Header)
	// normalizeRequest changes r only when it succeeds; a request it
	// refuses goes to the goroutine engine, which answers 400.
	if !normalizeRequest(r) {
		return nil
	}
	rt := t.match(r)
	if rt == nil || rt.redirect != nil || rt.access != nil || rt.rewrite != nil || rt.compress != nil ||
		rt.buffer != nil || rt.traffic != nil || rt.sticky != nil {
		return nil
	}
	tr, ok := rt.pipe.Transport().(*Transport)
	if !ok || tr.h1 == nil || tr.cfg.TLS != nil || rt.pipe.KeepsResponses() {
		return nil
	}
	x, _ := prev.(*loopExchange)
	var ids [][32]byte
	if x == nil {
		x = new(loopExchange)
	} else {
		ids = x.ids
	}
	*x = loopExchange{t: t, rt: rt, tg: &rt.target, tr: tr, start: now, h: h, ids: ids}
	if t.accessLog && lh.log != nil && lh.log.enabled() {
		x.log = lh.log
	}
	t.active.begin()
	st := &x.st
	x.requestID(r.Header)
	x.tg.metrics.Start()
	prepareHeader(r, &st.vals)
	c := &st.call
	c.Req, c.Front = r, st
	if r.ContentLength > 0 {
		c.Body = r.Body.(pipeline.BufferedBody)
	}
	delete(r.Header, "Connection")
	delete(r.Header, "Upgrade")
	return x
}

// requestID is reqState.requestID for a request on a loop: a made id is
// written in x.ids, not in the state the next request reuses.
func (x *loopExchange) requestID(req http.Header) {
	if len(x.ids) == 0 {
		x.ids = make([][32]byte, idSpace)
	}
	if x.st.requestID(req, nil, &x.ids[0]) {
		x.ids = x.ids[1:]
	}
}

// Call implements h1loop.Exchange.
func (x *loopExchange) Call() (*pipeline.Route, *pipeline.Call, h1loop.Upstream) {
	cfg := x.tr.cfg
	up := h1loop.Upstream{
		ConnectTimeout: cfg.ConnectTimeout, ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		IdleTimeout: cfg.IdleTimeout, MaxIdlePerEndpoint: cfg.MaxIdlePerEndpoint,
		MaxResponseHeaderBytes: int(cfg.MaxResponseHeaderBytes),
	}
	if x.log != nil {
		up.Header = x // the access log's upstream_ttfb_seconds; passed on to tr.header
	} else if x.tr.header != nil {
		up.Header = x.tr.header
	}
	return x.tg.pipe, &x.st.call, up
}

// Observe takes an attempt's time to its response head, in seconds, for
// the access log (the latest wins, as with the goroutine engine), and
// passes it on to the upstream's time-to-first-byte series.
func (x *loopExchange) Observe(seconds float64) {
	x.ttfb = time.Duration(seconds * float64(time.Second))
	if x.tr.header != nil {
		x.tr.header.Observe(seconds)
	}
}

// Respond implements h1loop.Exchange: the header respond would send. It
// is resp's own (the loop leaves hop-by-hop fields out as it writes it),
// unless a rate limit's fields are to go with it (the upstream's own win
// over those).
func (x *loopExchange) Respond(resp *http.Response) http.Header {
	c := &x.st.call
	dst := resp.Header
	if lim, ok := c.RateLimit(); ok {
		dst = make(http.Header, len(resp.Header)+4)
		lim.SetHeaders(dst)
		copyResponseHeader(dst, resp.Header)
	}
	if _, ok := dst["X-Request-Id"]; !ok {
		dst["X-Request-Id"] = x.st.vals[2:3:3]
	}
	if x.log != nil {
		x.noteDegraded(dst)
	}
	return dst
}

// noteDegraded keeps the degraded reason of the answer's header hdr for
// the access log (the loop reuses the header's map).
func (x *loopExchange) noteDegraded(hdr http.Header) {
	if v := hdr[fallback.HeaderDegraded]; len(v) > 0 {
		// A copy: a response the loop read lives in the connection's
		// memory (h1.Reuse), written over by the next one, and the log
		// line is written later, on another goroutine.
		x.degraded = strings.Clone(v[0])
	}
}

// Fail implements h1loop.Exchange: the answer failed would write.
func (x *loopExchange) Fail(err error) (int, http.Header, []byte) {
	c := &x.st.call
	w := &answerWriter{header: http.Header{"X-Request-Id": x.st.vals[2:3:3]}}
	if lim, ok := c.RateLimit(); ok {
		lim.SetHeaders(w.header)
	}
	res := x.h.failed(w, x.rt, x.tg, c, err)
	if res.status == pipeline.StatusClientClosed {
		return res.status, nil, nil
	}
	if x.log != nil {
		x.noteDegraded(w.header)
		x.answer = int64(w.body.Len())
	}
	return w.status, w.header, w.body.Bytes()
}

// Done implements h1loop.Exchange: what serve and ServeHTTP do after the
// answer.
func (x *loopExchange) Done(status int, in, out int64, bodyErr error, now time.Time) {
	c := &x.st.call
	c.FinishAt(status, bodyErr, now)
	took := now.Sub(x.start)
	rm := x.tg.metrics
	rm.Done(status, took.Seconds())
	rm.Bytes(in, out)
	if x.log != nil {
		if status != pipeline.StatusClientClosed {
			out += x.answer // as the goroutine engine's bytes_out, which counts the proxy's own answers
		}
		x.access(status, in, out, took)
	}
	x.t.active.end()
}

// access queues the access log line of the exchange.
func (x *loopExchange) access(status int, in, out int64, took time.Duration) {
	c := &x.st.call
	l := accessLine{
		status: status, attempts: c.Attempts(), took: took, ttfb: x.ttfb,
		in: in, out: out, requestID: x.st.vals[2], degraded: x.degraded,
	}
	l.request(x.h, c.Req, x.rt, x.tg, c.Endpoint())
	if x.log.out != nil {
		x.log.addLine(time.Now(), &l)
		return
	}
	// The record is handled later, on the queue's goroutine, after the
	// connection's next request may have been parsed over this one's.
	l.own()
	var w accessFields
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "access", 0)
	r.AddAttrs(l.attrs(&w)...)
	x.log.add(r)
}

// answerWriter takes an answer the proxy makes (WriteError) for the loop
// to send.
type answerWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *answerWriter) Header() http.Header { return w.header }
func (w *answerWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
func (w *answerWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// eventLoop is what a listener needs of its event-loop engine:
// h1loop.Server.
type eventLoop interface {
	SetSettings(h1loop.Settings)
	Shutdown(context.Context) error
	Close() error
	// Listener is a listener on the loops' socket for the goroutine
	// engine (h1loop.Server.Listener).
	Listener() (*net.TCPListener, error)
}

// loopSettings are the event-loop engine's client-side limits on a's
// socket; an accept that fails there is logged as the goroutine engine's
// accept loop logs it.
func (a *acceptLoop) loopSettings(st serverSettings) h1loop.Settings {
	return h1loop.Settings{
		ReadHeaderTimeout: st.readHeader, IdleTimeout: st.idle, MaxHeaderBytes: st.maxHeaderBytes,
		AcceptFailed: a.acceptFailed,
	}
}

// acceptFailed logs an accept that failed for want of a resource and how
// long the engine waits before it accepts again (either engine's).
func (a *acceptLoop) acceptFailed(err error, retry time.Duration) {
	a.log.Warn("accept failed, retrying", "listen", a.addr.String(), "error", err, "retry_in", retry)
}

// startEventLoop serves listener l's socket on event loops; the
// connections they hand over go to the listener's server, as accepted
// ones do. It pauses the goroutine engine's accept goroutine, and the
// loops take the socket: h1loop.New closes the accept loop's listener
// (a.ln is nil from then on; Listener gives one back). It returns nil,
// the listener left open for the caller to start the goroutine engine
// on, when the loops cannot start.
func startEventLoop(l *listener, st serverSettings, log *slog.Logger, m *Metrics) eventLoop {
	a := l.loop
	a.pause() // nothing accepts from the listener New closes
	q := startAccessQueue(l.name, l.handler.log, l.handler.out, accessQueueSize, accessFlushEvery)
	q.counter = m.AccessLogDropped(l.name)
	ev, err := h1loop.New(a.ln, loopHandler{h: l.handler, log: q}, a.deliver, a.loopSettings(st), 0)
	if err != nil {
		q.close()
		log.Error("event-loop engine unavailable, serving on the goroutine engine", "listener", l.name, "error", err)
		return nil
	}
	a.ln = nil
	e := &loopEngine{Server: ev, log: q}
	loopEngines.add(e)
	return e
}

// loopEngines are the process's running event-loop engines: a Transport
// whose endpoints leave their upstream has every loop close its idle
// connections to them (their pools are the loops', keyed by address, not
// the Transport's). One set for the process: a loop that had no
// connection to a departed address does nothing, one whose other
// upstream still has it redials.
var loopEngines engineSet

type engineSet struct {
	mu sync.Mutex
	m  map[*loopEngine]struct{}
}

func (s *engineSet) add(e *loopEngine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[*loopEngine]struct{}{}
	}
	s.m[e] = struct{}{}
}

func (s *engineSet) remove(e *loopEngine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, e)
}

// forget has every running loop close its idle connections to addrs.
func (s *engineSet) forget(addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for e := range s.m {
		e.Forget(addrs)
	}
}

// loopEngine is a listener's event loops and the queue of their access log
// lines, written out once the loops have stopped.
type loopEngine struct {
	*h1loop.Server
	log *accessQueue
}

// Close closes the loops, then writes the access log lines they queued.
// (A Shutdown is followed by a Close: shutdownEventLoop.)
func (e *loopEngine) Close() error {
	loopEngines.remove(e)
	err := e.Server.Close()
	e.log.close()
	return err
}

// stopAccepting makes ev stop accepting before it returns (its idle
// connections close too; the others go on): what Shutdown does before it
// waits, which a context already ended makes it skip. A later Shutdown
// (shutdownEventLoop) drains what is left.
func stopAccepting(ev eventLoop) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev.Shutdown(ctx)
}

// shutdownEventLoop drains ev for up to timeout, then closes what is
// left; it reports whether the drain finished in time.
func shutdownEventLoop(ev eventLoop, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := ev.Shutdown(ctx)
	ev.Close()
	return err == nil
}
