package httpproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
)

// HeaderLoad is the response header in which an endpoint may report its own
// load ("cpu=0.42, mem=0.31"). The proxy hands it to the balancer and does
// not pass it on to the client.
const HeaderLoad = "X-Switchboard-Load"

// Handler is one listener's request handler. Its routes are swapped whole
// on reload; a request keeps the table it started with.
type Handler struct {
	name string
	tbl  atomic.Pointer[table]
	log  *slog.Logger
}

func newHandler(name string, log *slog.Logger) *Handler {
	return &Handler{name: name, log: log}
}

// ServeHTTP routes and forwards one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := h.tbl.Load()
	t.active.Add(1)
	defer t.active.Add(-1)
	start := time.Now()
	rt := t.match(r)
	if rt == nil {
		WriteError(w, http.StatusNotFound, CodeNoRoute, "no route matches "+r.Method+" "+requestHost(r)+r.URL.Path)
		t.noRoute.count(http.StatusNotFound)
		h.access(t, r, nil, nil, http.StatusNotFound, start)
		return
	}
	rm := rt.metrics
	rm.inflight.Inc()
	st := h.serveRoute(w, r, t, rt, start)
	rm.inflight.Dec()
	rm.count(st.status)
	rm.duration.Observe(time.Since(start).Seconds())
	h.access(t, r, rt, st.ep, st.status, start)
	if st.abort {
		// The response is already under way and cannot be finished: tell
		// the server to cut the connection so the client sees a truncated
		// response rather than a complete-looking one.
		panic(http.ErrAbortHandler)
	}
}

// serveRoute passes the route's limits and breaker, then forwards.
func (h *Handler) serveRoute(w http.ResponseWriter, r *http.Request, t *table, rt *route, start time.Time) result {
	if ok, status := h.limit(w, r, rt, start); !ok {
		return result{status: status}
	}
	if rt.brk == nil {
		return h.guarded(w, r, t, rt, start)
	}
	ticket, err := rt.brk.Allow(start)
	if err != nil {
		// Open: the upstream is not touched at all.
		if st, ok := h.degrade(w, r, rt, fallback.BreakerOpen, "breaker_open"); ok {
			return result{status: st}
		}
		WriteError(w, http.StatusServiceUnavailable, CodeBreakerOpen, "route "+rt.name+": circuit breaker open")
		return result{status: http.StatusServiceUnavailable}
	}
	res := h.guarded(w, r, t, rt, start)
	now := time.Now()
	o := endpoint.Outcome{Status: res.status, Canceled: res.status == statusClientClosed, Latency: now.Sub(start)}
	if res.degraded {
		o.Err = errDegraded
	}
	ticket.Done(o, now)
	return res
}

// guarded forwards inside the route's and upstream's bulkheads.
func (h *Handler) guarded(w http.ResponseWriter, r *http.Request, t *table, rt *route, start time.Time) result {
	if rt.bulkhead == nil && rt.up.bulkhead == nil {
		return h.forward(w, r, t, rt, start)
	}
	release := enter(w, r, rt, h.log)
	if release == nil {
		return result{status: http.StatusServiceUnavailable}
	}
	// Deferred, so that not even a panic in the handler leaks a slot.
	defer release()
	return h.forward(w, r, t, rt, start)
}

// limit runs the route's rate limits. It reports false, with the status
// written, when the request may not go on.
func (h *Handler) limit(w http.ResponseWriter, r *http.Request, rt *route, start time.Time) (bool, int) {
	if len(rt.limiters) > 0 {
		if ok, status := admit(w, r, rt, start); !ok {
			return false, status
		}
	}
	return true, 0
}

// result is what forwarding one request came to.
type result struct {
	status int // as sent to the client; 499 when the client went away first
	ep     *endpoint.Endpoint
	abort  bool
	// degraded: a fallback step answered in place of a failed upstream;
	// the route breaker counts the failure, not the fallback's status.
	degraded bool
}

// statusClientClosed is recorded (not sent) when the client went away
// before a response could be written, as nginx does.
const statusClientClosed = 499

var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

func (h *Handler) forward(w http.ResponseWriter, r *http.Request, t *table, rt *route, start time.Time) result {
	ctx := r.Context()
	var deadline time.Time
	if rt.timeout > 0 {
		deadline = start.Add(rt.timeout)
	}
	var body io.Reader
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = r.Body
		if t.maxBody > 0 {
			if r.ContentLength > t.maxBody {
				WriteError(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
					"request body of "+strconv.FormatInt(r.ContentLength, 10)+" bytes exceeds max_body_bytes "+strconv.FormatInt(t.maxBody, 10))
				return result{status: http.StatusRequestEntityTooLarge}
			}
			body = http.MaxBytesReader(w, r.Body, t.maxBody)
		}
	}
	// One allocation holds what the request needs on the heap: the
	// balancer's Info (it crosses an interface) and the backing arrays of
	// the header values the proxy adds.
	st := new(reqState)
	prepareHeader(r, &st.vals)
	out := &st.out
	*out = outRequest{req: r, uri: requestURI(r), host: r.Host, header: r.Header, body: body, length: r.ContentLength}
	if body == nil {
		out.length = 0
	}
	if r.ProtoMajor == 1 {
		out.upgrade = upgradeOf(r)
	}
	delete(r.Header, "Connection")
	delete(r.Header, "Upgrade")

	info := &st.info
	if rt.up.hashKey != nil {
		info.Key, info.HasKey = rt.up.requestKey(r)
	}
	pol := rt.retry
	maxAttempts := 2 // without a policy: one more try after a connect failure or a broken idempotent exchange
	var rb *retry.ReplayableBody
	idempotent := true
	if pol != nil {
		maxAttempts = pol.Attempts
		idempotent = retry.Retryable(r.Method, r.Header, pol.RetryNonIdempotent)
		rt.budget.Deposit(start)
		if body != nil && idempotent {
			// Kept while it is first sent (never read ahead), so that it
			// can go again; past body_limit it cannot.
			rb = retry.NewReplayableBody(io.NopCloser(body), pol.BodyLimit)
		}
	}
	for attempt := 0; ; attempt++ {
		if rb != nil {
			rd, err := rb.NewReader()
			if err != nil {
				break // cannot happen on the first attempt; retries check Replayable first
			}
			out.body = rd
		}
		pick, err := rt.up.bal.Pick(info)
		if err != nil {
			if st, ok := h.degrade(w, r, rt, fallback.NoHealthyEndpoint, "no_healthy_endpoint"); ok {
				return result{status: st, degraded: true}
			}
			WriteError(w, http.StatusServiceUnavailable, CodeNoEndpoint, "upstream "+rt.up.name+" has no endpoint that can take traffic")
			return result{status: http.StatusServiceUnavailable}
		}
		ep := pick.Endpoint
		t0 := start
		if attempt > 0 {
			t0 = time.Now()
		}
		tryDeadline := deadline
		if pol != nil && pol.PerTryTimeout > 0 {
			if d := t0.Add(pol.PerTryTimeout); tryDeadline.IsZero() || d.Before(tryDeadline) {
				tryDeadline = d
			}
		}
		var resp *http.Response
		if hedgeAfter := h.hedgeDelay(rt, pol, attempt, body, idempotent, out); hedgeAfter > 0 {
			resp, pick, t0, err = h.hedge(ctx, rt, info, out, tryDeadline, hedgeAfter, pick, t0)
			ep = pick.Endpoint
		} else {
			resp, err = rt.up.roundTrip(ctx, tryDeadline, ep, out)
		}
		if err == nil && rt.p95 != nil {
			rt.p95.add(time.Since(t0))
		}
		if err != nil {
			clientGone := ctx.Err() != nil
			pick.Done(endpoint.Outcome{Err: err, Latency: time.Since(t0), Canceled: clientGone || isBodyError(err)})
			if reason := h.retryAfterError(rt, pol, err, attempt, maxAttempts, idempotent, rb, out.replayable(), clientGone, deadline); reason != "" {
				h.upstreamError(rt, ep, reason)
				if h.retryWait(ctx, rt, pol, attempt, reason, deadline) {
					st.tried = append(st.tried, ep)
					info.Tried = st.tried
					continue
				}
			}
			return h.fail(w, r, rt, ep, err)
		}
		if pol != nil && pol.RetryStatus(resp.StatusCode) && attempt+1 < maxAttempts && idempotent &&
			(rb == nil || rb.Replayable()) && rt.budget.TryWithdraw(time.Now()) {
			// A status worth another try: this answer is dropped unseen.
			io.CopyN(io.Discard, resp.Body, 64<<10)
			resp.Body.Close()
			pick.Done(endpoint.Outcome{Status: resp.StatusCode, Latency: time.Since(t0)})
			if h.retryWait(ctx, rt, pol, attempt, "status", deadline) {
				st.tried = append(st.tried, ep)
				info.Tried = st.tried
				continue
			}
			WriteError(w, http.StatusGatewayTimeout, CodeUpstreamTimeout, "upstream "+rt.up.name+": no time left to retry")
			return result{status: http.StatusGatewayTimeout, ep: ep}
		}
		hdrLatency := time.Since(t0)
		load := ""
		if v, ok := resp.Header[rt.up.loadHeader]; ok {
			if len(v) > 0 {
				load = v[0]
			}
			delete(resp.Header, rt.up.loadHeader)
		}
		res := h.respond(w, r, t, rt, resp, st.vals[2:3:3], out.upgrade != "")
		res.ep = ep
		o := endpoint.Outcome{Status: resp.StatusCode, Latency: hdrLatency, LoadReport: load}
		if res.abort && ctx.Err() == nil {
			o.Err = errUpstreamBody
		}
		pick.Done(o)
		return res
	}
	WriteError(w, http.StatusBadGateway, CodeUpstreamError, "upstream "+rt.up.name+": the request body cannot be sent again")
	return result{status: http.StatusBadGateway}
}

// hedgeDelay is how long the first attempt may go unanswered before a hedge
// is sent, or 0 for no hedge: only the first attempt of an idempotent
// request without a body (nothing to replay) that switches no protocol.
func (h *Handler) hedgeDelay(rt *route, pol *retry.Policy, attempt int, body io.Reader, idempotent bool, out *outRequest) time.Duration {
	if pol == nil || attempt > 0 || body != nil || !idempotent || out.upgrade != "" {
		return 0
	}
	after, p95, on := pol.Hedge()
	if !on {
		return 0
	}
	if p95 {
		return rt.p95.get() // 0 until enough has been seen
	}
	return after
}

// retryAfterError decides whether a failed attempt is tried again and says
// why ("connect", "reset", "timeout"), or "" when it is not. A connect
// failure sent nothing and is always safe. Without a policy, an exchange
// that broke before any response byte is tried again too when the request
// can be sent again (idempotent, no body: replayable): an endpoint shutting
// down resets the connections in its accept queue, and a GET that met one
// must not fail for it. nginx's default proxy_next_upstream (error) does
// the same for idempotent requests; a timeout is not retried (a slow
// endpoint would get the load twice). Anything else needs a policy that
// retries it, an idempotent request and a body that can be sent again.
// Every retry under a policy is paid from the route's retry budget.
func (h *Handler) retryAfterError(rt *route, pol *retry.Policy, err error, attempt, maxAttempts int, idempotent bool, rb *retry.ReplayableBody, replayable, clientGone bool, deadline time.Time) string {
	if clientGone || attempt+1 >= maxAttempts || isBodyError(err) {
		return ""
	}
	now := time.Now()
	if !deadline.IsZero() && !now.Before(deadline) {
		return "" // the route's own time is up
	}
	var ce *connectError
	isConnect := errors.As(err, &ce)
	if pol == nil {
		switch {
		case len(rt.up.pool.Snapshot().Ready) < 2:
			return ""
		case isConnect:
			return "connect"
		case replayable && !isTimeout(err):
			return "reset"
		}
		return ""
	}
	reason := "connect"
	if !isConnect {
		if !pol.RetryError(err) || !idempotent || (rb != nil && !rb.Replayable()) {
			return ""
		}
		reason = "reset"
		if isTimeout(err) {
			reason = "timeout"
		}
	} else if !pol.RetryError(err) {
		return ""
	}
	if !rt.budget.TryWithdraw(now) {
		rt.metrics.m.retries.WithLabelValues(rt.up.name, "budget_exhausted").Inc()
		return ""
	}
	return reason
}

// retryWait counts a retry and waits its backoff (full jitter). It reports
// false when the client went away or the route's deadline would pass.
func (h *Handler) retryWait(ctx context.Context, rt *route, pol *retry.Policy, attempt int, reason string, deadline time.Time) bool {
	label := reason
	if reason == "connect" {
		label = "connect_failure"
	}
	rt.metrics.m.retries.WithLabelValues(rt.up.name, label).Inc()
	if pol == nil {
		return true
	}
	d := pol.Backoff(attempt, nil)
	if !deadline.IsZero() && time.Now().Add(d).After(deadline) {
		return false
	}
	return ratelimit.Sleep(ctx, d) == nil
}

var (
	errUpstreamBody = errors.New("upstream broke off the response body")
	errDegraded     = errors.New("upstream failed; a fallback step answered")
)

// reqState is the per-request state that must live on the heap.
type reqState struct {
	out   outRequest
	info  balance.Info
	tried []*endpoint.Endpoint // endpoints already used, for retries
	// vals backs the values of X-Forwarded-For, X-Forwarded-Host and
	// X-Request-Id.
	vals [3]string
}

func isBodyError(err error) bool {
	var be *bodyError
	return errors.As(err, &be)
}

func (h *Handler) upstreamError(rt *route, ep *endpoint.Endpoint, kind string) {
	rt.metrics.m.errors.WithLabelValues(rt.up.name, ep.Address(), kind).Inc()
}

// fail answers a request whose upstream exchange failed before a response.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, rt *route, ep *endpoint.Endpoint, err error) result {
	res := result{ep: ep}
	var mbErr *http.MaxBytesError
	if r.Context().Err() == nil && !isBodyError(err) && !errors.As(err, &mbErr) {
		// Every attempt failed at the transport level.
		if st, ok := h.degrade(w, r, rt, fallback.RetriesExhausted, "retries_exhausted"); ok {
			res.status, res.degraded = st, true
			return res
		}
	}
	var ce *connectError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		res.status = http.StatusRequestEntityTooLarge
		WriteError(w, res.status, CodeBodyTooLarge, "request body exceeds max_body_bytes "+strconv.FormatInt(mbe.Limit, 10))
	case r.Context().Err() != nil:
		res.status = statusClientClosed
	case isBodyError(err):
		res.status = http.StatusBadRequest
		WriteError(w, res.status, CodeBadRequest, "could not read the request body")
	case errors.As(err, &ce):
		h.upstreamError(rt, ep, "connect")
		res.status = http.StatusBadGateway
		WriteError(w, res.status, CodeConnectFailed, "upstream "+rt.up.name+": could not connect to "+ep.Address())
	case isTimeout(err):
		h.upstreamError(rt, ep, "timeout")
		res.status = http.StatusGatewayTimeout
		WriteError(w, res.status, CodeUpstreamTimeout, "upstream "+rt.up.name+": "+ep.Address()+" did not answer in time")
	default:
		h.upstreamError(rt, ep, "reset")
		res.status = http.StatusBadGateway
		WriteError(w, res.status, CodeUpstreamError, "upstream "+rt.up.name+": "+ep.Address()+" broke the exchange")
	}
	if res.status != statusClientClosed {
		h.log.Debug("upstream request failed", "listener", h.name, "route", rt.name, "upstream", rt.up.name, "endpoint", ep.Address(), "error", err)
	}
	return res
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// respond relays the upstream's response to the client.
func (h *Handler) respond(w http.ResponseWriter, r *http.Request, t *table, rt *route, resp *http.Response, reqID []string, upgrade bool) result {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if !upgrade {
			resp.Body.Close()
			WriteError(w, http.StatusBadGateway, CodeUpstreamError, "upstream switched protocols unasked")
			return result{status: http.StatusBadGateway}
		}
		return h.tunnel(w, t, resp)
	}
	if rt.fb != nil && rt.fb.Triggers().OnStatus(resp.StatusCode) {
		if st, ok := h.degrade(w, r, rt, fallback.StatusCode, fallback.StatusReason(resp.StatusCode)); ok {
			resp.Body.Close()
			return result{status: st, degraded: true}
		}
	}
	var stale *staleRecorder
	var staleHeader http.Header
	if rt.fb != nil && rt.fb.Cache() != nil && r.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		// A good answer is kept for the stale step, if small enough.
		stale, staleHeader = &staleRecorder{max: rt.staleMax}, resp.Header.Clone()
	}
	dst := w.Header()
	copyResponseHeader(dst, resp.Header)
	if _, ok := dst["X-Request-Id"]; !ok {
		dst["X-Request-Id"] = reqID
	}
	if _, ok := dst["Content-Type"]; !ok {
		// Do not let the server guess a type the upstream did not send.
		dst["Content-Type"] = nil
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		dst["Trailer"] = []string{strings.Join(names, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	// A response of unknown length is a stream (server-sent events, gRPC
	// over h2c, chunked progress): every piece goes out as it arrives.
	flush := resp.ContentLength < 0
	var body io.Reader = resp.Body
	if stale != nil {
		body = io.TeeReader(resp.Body, stale)
	}
	rerr, werr := copyBody(w, body, flush)
	resp.Body.Close()
	res := result{status: resp.StatusCode}
	switch {
	case werr != nil:
		// The client went away; nothing to do.
	case rerr != nil:
		h.log.Debug("upstream response body broke off", "listener", h.name, "error", rerr)
		res.abort = true
	default:
		for k, vv := range resp.Trailer {
			dst[http.TrailerPrefix+k] = vv
		}
		if stale != nil && !stale.over {
			rt.fb.Store(cacheKey(r), resp.StatusCode, staleHeader, stale.buf.Bytes(), time.Now())
		}
	}
	return res
}

// copyBody copies the response body to the client, flushing after each
// piece when flush is set. It returns the read and the write error apart.
func copyBody(w http.ResponseWriter, body io.Reader, flush bool) (rerr, werr error) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	var fl http.Flusher
	if flush {
		fl, _ = w.(http.Flusher)
	}
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr = w.Write(buf[:n]); werr != nil {
				return nil, werr
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}

// tunnel completes a protocol switch (WebSocket): it hands the client the
// upstream's 101 answer, then copies bytes both ways until both sides are
// done or the connection sits idle for the listener's idle timeout.
func (h *Handler) tunnel(w http.ResponseWriter, t *table, resp *http.Response) result {
	ub, ok := resp.Body.(*upstreamBody)
	if !ok {
		resp.Body.Close()
		WriteError(w, http.StatusBadGateway, CodeUpstreamError, "protocol switch is not supported on this upstream")
		return result{status: http.StatusBadGateway}
	}
	// The tunnel outlives the request's deadline; the idle timeout bounds
	// it instead.
	if ub.stop != nil {
		ub.stop()
		ub.stop = nil
	}
	up := ub.pc
	defer func() { ub.close = true; ub.Close() }()
	client, cbuf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		WriteError(w, http.StatusBadGateway, CodeUpstreamError, "cannot switch protocols on this connection")
		return result{status: http.StatusBadGateway}
	}
	defer client.Close()
	up.conn.SetDeadline(time.Time{})
	client.SetDeadline(time.Time{})

	cbuf.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Write(cbuf)
	cbuf.WriteString("\r\n")
	if err := cbuf.Flush(); err != nil {
		return result{status: http.StatusSwitchingProtocols}
	}
	idle := t.idle
	done := make(chan struct{})
	go func() {
		defer close(done)
		pump(up.conn, client, cbuf.Reader, idle)
	}()
	pump(client, up.conn, up.br, idle)
	<-done
	return result{status: http.StatusSwitchingProtocols}
}

// pump copies src (first what is already buffered in br) to dst until EOF
// or an error, then half-closes dst so the other side sees the end.
func pump(dst, src net.Conn, br *bufio.Reader, idle time.Duration) {
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	var r io.Reader = src
	if br != nil && br.Buffered() > 0 {
		r = io.MultiReader(io.LimitReader(br, int64(br.Buffered())), src)
	}
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := r.Read(buf)
		if n > 0 {
			if idle > 0 {
				dst.SetWriteDeadline(time.Now().Add(idle))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == io.EOF {
				cw.CloseWrite()
			} else {
				dst.Close()
				src.Close()
			}
			return
		}
	}
}

func (h *Handler) access(t *table, r *http.Request, rt *route, ep *endpoint.Endpoint, status int, start time.Time) {
	if !t.accessLog {
		return
	}
	routeName, upName, epAddr := "", "", ""
	if rt != nil {
		routeName, upName = rt.name, rt.up.name
	}
	if ep != nil {
		epAddr = ep.Address()
	}
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "access",
		slog.String("listener", h.name),
		slog.String("remote", r.RemoteAddr),
		slog.String("method", r.Method),
		slog.String("host", r.Host),
		slog.String("path", r.URL.Path),
		slog.String("proto", r.Proto),
		slog.Int("status", status),
		slog.String("route", routeName),
		slog.String("upstream", upName),
		slog.String("endpoint", epAddr),
		slog.Duration("duration", time.Since(start)),
		slog.String("request_id", r.Header.Get("X-Request-Id")),
	)
}

// prepareHeader turns the client's request header into the upstream's, in
// place: it removes hop-by-hop fields (RFC 9110 7.6.1), also those the
// client names in Connection, appends the client to X-Forwarded-For, sets
// X-Forwarded-Proto and -Host for this hop, and keeps or makes X-Request-Id.
// Connection and Upgrade are left for the caller (it needs them to see a
// protocol switch). The values it sets are backed by vals.
func prepareHeader(r *http.Request, vals *[3]string) {
	h := r.Header
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" || strings.EqualFold(name, "upgrade") {
				continue
			}
			delete(h, http.CanonicalHeaderKey(name))
		}
	}
	for k, vv := range h {
		switch k {
		case "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
			"Trailer", "Transfer-Encoding", "Content-Length", "Host":
			// Content-Length and Transfer-Encoding are re-framed by the
			// client side; Host travels as the request's host.
			delete(h, k)
		case "Te":
			// "TE: trailers" is end-to-end for gRPC; any other TE is not.
			if len(vv) != 1 || vv[0] != "trailers" {
				delete(h, k)
			}
		}
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		switch prior := h["X-Forwarded-For"]; len(prior) {
		case 0:
		case 1:
			ip = prior[0] + ", " + ip
		default:
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		vals[0] = ip
		h["X-Forwarded-For"] = vals[0:1:1]
	}
	if r.TLS != nil {
		h["X-Forwarded-Proto"] = protoHTTPS
	} else {
		h["X-Forwarded-Proto"] = protoHTTP
	}
	vals[1] = r.Host
	h["X-Forwarded-Host"] = vals[1:2:2]
	if id := h["X-Request-Id"]; len(id) == 1 && validRequestID(id[0]) {
		vals[2] = id[0]
	} else {
		vals[2] = newRequestID()
	}
	h["X-Request-Id"] = vals[2:3:3]
}

// upgradeOf returns the protocol an HTTP/1.1 request asks to switch to, or
// "".
func upgradeOf(r *http.Request) string {
	up := r.Header["Upgrade"]
	if len(up) != 1 || up[0] == "" {
		return ""
	}
	for _, v := range r.Header["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return up[0]
			}
		}
	}
	return ""
}

func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

func newRequestID() string {
	const hexdigits = "0123456789abcdef"
	var b [32]byte
	a, c := rand.Uint64(), rand.Uint64()
	for i := 0; i < 16; i++ {
		b[i] = hexdigits[a>>(60-4*i)&0xf]
		b[16+i] = hexdigits[c>>(60-4*i)&0xf]
	}
	return string(b[:])
}

// requestURI is the request target to send upstream. The client's own
// target goes as it came unless it holds a byte that could end the request
// line early (HTTP/2's :path may carry spaces): then the parsed URL's
// escaped form goes instead.
func requestURI(r *http.Request) string {
	if u := r.RequestURI; u != "" && (u[0] == '/' || u == "*") && safeTarget(u) {
		return u
	}
	return r.URL.RequestURI()
}

func safeTarget(u string) bool {
	for i := 0; i < len(u); i++ {
		if c := u[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// copyResponseHeader copies the upstream's response header to the client's
// without hop-by-hop fields. Values are shared, not copied: the upstream's
// header is not used again.
func copyResponseHeader(dst, src http.Header) {
	conn := src["Connection"]
	for k, vv := range src {
		switch k {
		case "Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Trailer", "Te":
			continue
		}
		if len(conn) > 0 && namedIn(conn, k) {
			continue
		}
		dst[k] = vv
	}
}

func namedIn(list []string, name string) bool {
	for _, v := range list {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), name) {
				return true
			}
		}
	}
	return false
}
