package httpproxy

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/acme"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// Handler is one listener's request handler: it routes each request and
// runs it through its route's pipeline, then relays the answer. Its table
// is swapped whole on reload; a request keeps the table it started with.
type Handler struct {
	name string
	tbl  atomic.Pointer[Table]
	log  *slog.Logger
	// out writes the access log lines when the Server has an AccessLog;
	// nil: they go through log.
	out *accessOutput
	// acmeHTTP answers http-01 challenges for the tls.acme listeners
	// that name this one as their http_listener, or is nil.
	acmeHTTP atomic.Pointer[acme.HTTPChallenges]
}

// ServeHTTP routes and forwards one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.acmeHTTP.Load().Serve(w, r) {
		return
	}
	t := h.tbl.Load()
	t.active.begin()
	defer t.active.end()
	start := time.Now()
	// The request's state, its id (on the response from here on, so that
	// every answer carries it) and, when the access log or tracing is on,
	// what they observe (observe.go).
	scrubRequestHeader(r.Header)
	st := new(reqState)
	st.requestID(r.Header, w.Header(), nil)
	if t.accessLog || t.tracer != nil {
		w, r = st.observe(t, w, r)
	}
	if r.ProtoMajor == 2 && !httpguts.ValidHostHeader(r.Host) {
		// net/http checks an HTTP/1 Host so, not HTTP/2's :authority; it
		// goes upstream as the Host line, and into {host}.
		h.unrouted(w, r, t, st, start, http.StatusBadRequest, pipeline.CodeBadRequest, "malformed :authority")
		return
	}
	if t.front != nil {
		if h.front(w, r, t, st, start) {
			return
		}
		// Before anything reads the header: routes match on it, and
		// forward auth sends it to its service.
		t.front.clientCert(r)
	}
	if !normalizeRequest(r) {
		h.unrouted(w, r, t, st, start, http.StatusBadRequest, pipeline.CodeBadRequest, "request path climbs above the root or is malformed")
		return
	}
	rt := t.match(r)
	if rt == nil {
		h.unrouted(w, r, t, st, start, http.StatusNotFound, CodeNoRoute, "no route matches "+r.Method+" "+requestHost(r)+r.URL.Path)
		return
	}
	tg := rt.pick(r)
	rm := tg.metrics
	rm.Start()
	var res result
	if rt.redirect != nil {
		var done bool
		if rt.access != nil {
			res, done = h.checkAccess(w, r, t, rt, start)
		}
		if !done {
			res = h.serveRedirect(w, r, rt)
		}
	} else {
		res = h.serve(w, r, t, rt, tg, st, start)
	}
	rm.Done(res.status, time.Since(start).Seconds())
	rm.Bytes(res.in, res.out)
	h.observed(t, st, w, r, rt, tg, res, start)
	if res.abort {
		// The response is already under way and cannot be finished: tell
		// the server to cut the connection so the client sees a truncated
		// response rather than a complete-looking one.
		panic(http.ErrAbortHandler)
	}
}

// unrouted answers a request refused before it has a route, counted on
// the listener's no-route series.
func (h *Handler) unrouted(w http.ResponseWriter, r *http.Request, t *Table, st *reqState, start time.Time, status int, code, msg string) {
	WriteError(w, status, code, msg)
	t.noRoute.Count(status)
	h.observed(t, st, w, r, nil, nil, result{status: status}, start)
}

// result is what serving one request came to.
type result struct {
	status int // as sent to the client; 499 when the client went away first
	ep     *endpoint.Endpoint
	abort  bool
	// bodyErr cut the upstream's response body short.
	bodyErr error
	// in and out count the body bytes read from the client and written
	// to it (a relayed body's; not those of an answer the proxy makes).
	in, out int64
	// err is why the pipeline gave no answer (a *pipeline.Error), if so.
	err error
}

var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// reqState is the per-request state that must live on the heap, in one
// allocation: the pipeline's call, the backing array of the header values
// the proxy adds, the bytes of a request id it makes, the first HTTP/1
// exchange's response body, and what the access log and tracing observe.
// It is the call's Front, and is never reused: whatever points into it
// keeps it alive.
type reqState struct {
	call pipeline.Call
	// vals backs the values of X-Forwarded-For, X-Forwarded-Host and
	// X-Request-Id.
	vals [3]string
	// id backs a request id made for this request (vals[2]).
	id [32]byte
	// body is the response body of the call's first HTTP/1 exchange
	// (takeBody); a retry or hedge after it gets one of its own.
	body      h1.Body
	bodyTaken atomic.Bool
	// rewrite is the route's rewrites' state (rewrite.go).
	rewrite rewriteState
	// obs is what the access log and tracing see of the request; unused
	// when both are off.
	obs observation
	// in counts the streamed request body as it is read (bytes metrics
	// and the access log's bytes_in).
	in countingReader
}

// takeBody hands the first exchange of the call the body kept in its
// state; nil after that.
func (st *reqState) takeBody() *h1.Body {
	if st.bodyTaken.CompareAndSwap(false, true) {
		return &st.body
	}
	return nil
}

// serve runs r through route rt's pipeline over target tg and relays the
// answer.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, t *Table, rt *route, tg *target, st *reqState, start time.Time) (res result) {
	if rt.access != nil {
		if res, done := h.checkAccess(w, r, t, rt, start); done {
			return res
		}
	}
	body, held, res, ok := h.requestBody(w, r, t, rt, start)
	if !ok {
		return res
	}
	if held != nil {
		defer held.Close() // after Finish, deferred below
	}
	if held == nil && body != nil {
		st.in.r = body
		body = &st.in
	}
	prepareHeader(r, &st.vals)
	if rt.rewrite != nil {
		var ok bool
		if r, ok = rt.rewrite.request(r, st.vals[2], tg.pipe.Upstream().Name(), &st.rewrite); !ok {
			WriteError(w, http.StatusBadRequest, pipeline.CodeBadRequest, "the route's rewrite makes the path climb above the root")
			return result{status: http.StatusBadRequest}
		}
	}
	c := &st.call
	c.Req, c.Body, c.Front = r, body, st
	if r.ProtoMajor == 1 {
		c.Upgrade = upgradeOf(r)
	}
	delete(r.Header, "Connection")
	delete(r.Header, "Upgrade")

	// A panic while relaying (a writer refusing a status, say) must still
	// give the call's concurrency slots and its endpoint back: the status
	// it leaves is the broken exchange's.
	res.status = http.StatusBadGateway
	defer func() {
		res.ep = c.Endpoint()
		if held != nil {
			res.in = r.ContentLength // buffered whole before the call
		} else {
			res.in = st.in.n.Load()
		}
		c.Finish(res.status, res.bodyErr)
	}()
	if tg.sticky != nil {
		c.Prefer = tg.sticky.endpoint(r)
	}
	var mc *mirrorCopy
	if rt.traffic != nil && rt.traffic.mirror != nil {
		mc = rt.traffic.mirror.begin(r, c)
	}
	resp, err := tg.pipe.Do(c, start)
	if mc != nil {
		mc.send(err)
	}
	if lim, ok := c.RateLimit(); ok {
		lim.SetHeaders(w.Header())
	}
	if err != nil {
		return h.failed(w, rt, tg, c, err)
	}
	if tg.sticky != nil && !c.Degraded() {
		tg.sticky.set(resp.Header, c.Endpoint(), c.Prefer)
	}
	return h.respond(w, t, rt, c, resp, st.vals[2:3:3])
}

// requestBody returns the body to send upstream (nil for none) and, when
// route rt buffers bodies, the buffered body to close once the request is
// done. ok is false when the request was answered instead (413, or for a
// buffered body 408, 400 or 500).
func (h *Handler) requestBody(w http.ResponseWriter, r *http.Request, t *Table, rt *route, start time.Time) (body io.Reader, held *bufferedBody, res result, ok bool) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, nil, result{}, true
	}
	if t.maxBody > 0 && r.ContentLength > t.maxBody {
		bodyError(w, r, http.StatusRequestEntityTooLarge, pipeline.CodeBodyTooLarge,
			"request body of "+strconv.FormatInt(r.ContentLength, 10)+" bytes exceeds max_body_bytes "+strconv.FormatInt(t.maxBody, 10))
		return nil, nil, result{status: http.StatusRequestEntityTooLarge}, false
	}
	if rt.buffer == nil {
		if t.maxBody > 0 {
			return http.MaxBytesReader(w, r.Body, t.maxBody), nil, result{}, true
		}
		return r.Body, nil, result{}, true
	}
	limit, limitName := rt.buffer.max, "buffer_requests.max"
	if t.maxBody > 0 && t.maxBody < limit {
		limit, limitName = t.maxBody, "max_body_bytes"
	}
	var deadline time.Time
	if rt.timeout > 0 {
		deadline = start.Add(rt.timeout)
	}
	b, err := rt.buffer.read(r.Body, r.ContentLength, limit, limitName, deadline)
	if err != nil {
		if b != nil {
			b.Close()
		}
		var be *bufferError
		if !errors.As(err, &be) {
			be = &bufferError{status: http.StatusBadRequest, code: pipeline.CodeBadRequest, msg: err.Error()}
		}
		if be.status == http.StatusInternalServerError {
			h.log.Warn("request body not buffered", "listener", h.name, "route", rt.name, "error", be.err)
		}
		bodyError(w, r, be.status, be.code, be.msg)
		return nil, nil, result{status: be.status}, false
	}
	// The body goes upstream with its length, chunked or not as it came.
	r.ContentLength = b.size
	if b.size == 0 {
		b.Close()
		return nil, nil, result{}, true
	}
	return b, b, result{}, true
}

// bodyError answers a request whose body was not taken. An HTTP/1.x
// connection is closed after the answer: the rest of the body would have
// to be read first, and a client that stalled would hold it that long
// again. (On HTTP/2 only the stream ends; Connection: close there would
// end the whole connection.)
func bodyError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	WriteError(w, status, code, msg)
}

// failed answers a request the pipeline could not get an answer for.
func (h *Handler) failed(w http.ResponseWriter, rt *route, tg *target, c *pipeline.Call, err error) result {
	var pe *pipeline.Error
	if !errors.As(err, &pe) {
		pe = &pipeline.Error{Status: http.StatusBadGateway, Code: pipeline.CodeUpstreamError, Msg: err.Error()}
	}
	if tb, ok := c.Req.Body.(interface{ TimedOut() bool }); ok && pe.Status == pipeline.StatusClientClosed && tb.TimedOut() {
		// The client did not go: its body stopped coming.
		pe = &pipeline.Error{Status: http.StatusRequestTimeout, Code: pipeline.CodeRequestTimeout, Err: err, Msg: "the request body stopped coming"}
	}
	if pe.Status != pipeline.StatusClientClosed {
		pe.SetHeaders(w.Header())
		if pe.Code == pipeline.CodeRequestTimeout {
			bodyError(w, c.Req, pe.Status, pe.Code, pe.Msg)
		} else {
			WriteError(w, pe.Status, pe.Code, pe.Msg)
		}
		if pe.Err != nil {
			h.log.Debug("request failed", "listener", h.name, "route", rt.name, "upstream", tg.pipe.Upstream().Name(), "code", pe.Code, "error", pe.Err)
		}
	}
	return result{status: pe.Status, err: pe}
}

// respond relays a response to the client: the upstream's, or a fallback
// step's.
func (h *Handler) respond(w http.ResponseWriter, t *Table, rt *route, c *pipeline.Call, resp *http.Response, reqID []string) result {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if c.Upgrade == "" {
			resp.Body.Close()
			WriteError(w, http.StatusBadGateway, pipeline.CodeUpstreamError, "upstream switched protocols unasked")
			return result{status: http.StatusBadGateway}
		}
		return h.tunnel(w, t, resp, c.Upgrade)
	}
	dst := w.Header()
	copyResponseHeader(dst, resp.Header)
	if t.front != nil {
		t.front.setHSTS(dst, c.Req)
	}
	if rt.access != nil && rt.access.cors != nil {
		rt.access.cors.decorate(dst, c.Req)
	}
	if _, ok := dst["X-Request-Id"]; !ok {
		dst["X-Request-Id"] = reqID
	}
	if st, ok := c.Front.(*reqState); ok {
		st.rewrite.response(dst, c, reqID[0])
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
	var cd *coder
	if rt.compress != nil {
		var err error
		if cd, err = rt.compress.start(dst, c.Req, resp); err != nil {
			resp.Body.Close()
			for k := range resp.Header {
				delete(dst, k)
			}
			WriteError(w, http.StatusBadGateway, pipeline.CodeUpstreamError, "upstream response body could not be read: "+err.Error())
			return result{status: http.StatusBadGateway, bodyErr: err}
		}
	}
	w.WriteHeader(resp.StatusCode)
	// A response of unknown length is a stream (server-sent events, gRPC
	// over h2c, chunked progress): every piece goes out as it arrives.
	var n int64
	var rerr, werr error
	if cd != nil {
		n, rerr, werr = cd.copy(w, resp.ContentLength < 0)
	} else {
		n, rerr, werr = copyBody(w, resp.Body, resp.ContentLength < 0)
	}
	resp.Body.Close()
	res := result{status: resp.StatusCode, out: n}
	switch {
	case werr != nil:
		// The client went away; nothing to do.
	case rerr != nil:
		h.log.Debug("upstream response body broke off", "listener", h.name, "error", rerr)
		res.abort, res.bodyErr = true, rerr
	default:
		for k, vv := range resp.Trailer {
			dst[http.TrailerPrefix+k] = vv
		}
	}
	return res
}

// copyBody copies the response body to the client, flushing after each
// piece when flush is set. It returns the bytes written, and the read and
// the write error apart.
func copyBody(w http.ResponseWriter, body io.Reader, flush bool) (written int64, rerr, werr error) {
	bp := h1.GetBuffer()
	defer h1.PutBuffer(bp)
	buf := *bp
	var fl http.Flusher
	if flush {
		fl, _ = w.(http.Flusher)
	}
	for {
		n, err := body.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, nil, werr
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err == io.EOF {
			return written, nil, nil
		}
		if err != nil {
			return written, err, nil
		}
	}
}

// tunnel completes a protocol switch (WebSocket): it hands the client the
// upstream's 101 answer, then copies bytes both ways until both sides are
// done or the connection sits idle for the listener's idle timeout. The
// answer carries the upstream's fields without the hop-by-hop ones, and
// then the two that make the switch: Connection: Upgrade, and the
// upstream's Upgrade (or, if it sent none, upgrade, the protocol asked
// for).
func (h *Handler) tunnel(w http.ResponseWriter, t *Table, resp *http.Response, upgrade string) result {
	ub, ok := resp.Body.(*h1.Body)
	if !ok {
		resp.Body.Close()
		WriteError(w, http.StatusBadGateway, pipeline.CodeUpstreamError, "protocol switch is not supported on this upstream")
		return result{status: http.StatusBadGateway}
	}
	// The tunnel outlives the request's deadline; the idle timeout bounds
	// it instead.
	up, upBuf := ub.Detach()
	defer ub.Close()
	client, cbuf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		WriteError(w, http.StatusBadGateway, pipeline.CodeUpstreamError, "cannot switch protocols on this connection")
		return result{status: http.StatusBadGateway}
	}
	defer client.Close()
	client.SetDeadline(time.Time{})

	if up := resp.Header["Upgrade"]; len(up) > 0 {
		upgrade = strings.Join(up, ", ")
	}
	hdr := make(http.Header, len(resp.Header)+1)
	hdr["X-Request-Id"] = w.Header()["X-Request-Id"]
	copyResponseHeader(hdr, resp.Header)
	cbuf.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	hdr.Write(cbuf)
	cbuf.WriteString("Connection: Upgrade\r\nUpgrade: ")
	cbuf.WriteString(strings.NewReplacer("\r", " ", "\n", " ").Replace(upgrade))
	cbuf.WriteString("\r\n\r\n")
	if err := cbuf.Flush(); err != nil {
		return result{status: http.StatusSwitchingProtocols}
	}
	idle := t.idle
	done := make(chan struct{})
	go func() {
		defer close(done)
		pump(up, client, cbuf.Reader, idle)
	}()
	pump(client, up, upBuf, idle)
	<-done
	return result{status: http.StatusSwitchingProtocols}
}

// pump copies src (first what is already buffered in br) to dst until EOF
// or an error, then half-closes dst so the other side sees the end.
func pump(dst, src net.Conn, br *bufio.Reader, idle time.Duration) {
	bp := h1.GetBuffer()
	defer h1.PutBuffer(bp)
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

// scrubRequestHeader is the first thing done to a request's header, by
// either engine, before anything reads it: the fields the client names in
// Connection (dropConnectionNamed) and underscore aliases of the fields
// the proxy sets (dropAliases) are removed.
func scrubRequestHeader(h http.Header) {
	dropConnectionNamed(h)
	dropAliases(h, proxySetHeaders)
}

// dropConnectionNamed removes the fields the client names in Connection
// (hop-by-hop, RFC 9110 7.6.1), but Upgrade and proxySetHeaders. It runs
// when the request comes in, before anything adds a field: a client must
// not be able to name one the proxy sets after its checks (forward auth's
// copy_response_headers, basic auth's user_header, the client
// certificate's header) and have it taken away. The X-Forwarded-* fields
// stay too: from a trusted proxy they name the client, and without them
// the client would pass as that proxy (Apache's CVE-2022-31813); the
// proxy sets them for the next hop anyway.
func dropConnectionNamed(h http.Header) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" || strings.EqualFold(name, "upgrade") {
				continue
			}
			name = http.CanonicalHeaderKey(name)
			if !slices.Contains(proxySetHeaders, name) {
				delete(h, name)
			}
		}
	}
}

// proxySetHeaders are the fields the proxy sets on every request to an
// upstream or to a forward auth service, whose underscore aliases a client
// may not send (dropAliases).
var proxySetHeaders = []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
	"X-Forwarded-Method", "X-Forwarded-Uri", "X-Request-Id"}

// prepareHeader turns the client's request header into the upstream's, in
// place: it removes hop-by-hop fields (RFC 9110 7.6.1; those the client
// names in Connection are gone already, dropConnectionNamed), appends the client to X-Forwarded-For, sets
// X-Forwarded-Proto and -Host for this hop. (X-Request-Id was set when the
// request came in: reqState.requestID.) Connection and Upgrade are left
// for the caller (it needs them to see a protocol switch). The values it
// sets are backed by vals[0:2].
func prepareHeader(r *http.Request, vals *[3]string) {
	h := r.Header
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
}

// requestID keeps the client's X-Request-Id when it is valid (one value,
// 1-128 visible ASCII characters) or makes one, and sets it on both the
// request (for the upstream) and the response (resp): every answer,
// the proxy's own errors included, carries it. It is backed by
// st.vals[2], and a made one by buf (nil: st.id), written once: made
// reports whether it was used. (resp may be nil.)
func (st *reqState) requestID(req, resp http.Header, buf *[32]byte) (made bool) {
	if id := req["X-Request-Id"]; len(id) == 1 && validRequestID(id[0]) {
		st.vals[2] = id[0]
	} else {
		if buf == nil {
			buf = &st.id
		}
		st.vals[2] = newRequestID(buf)
		made = true
	}
	req["X-Request-Id"] = st.vals[2:3:3]
	if resp != nil {
		resp["X-Request-Id"] = st.vals[2:3:3]
	}
	return made
}

// upgradeOf returns the protocol an HTTP/1.1 request asks to switch to, or
// "". An HTTP/1.0 request's Upgrade is ignored (RFC 9110 7.8), and so is
// one that offers h2c: a tunnel to an upstream that switched to HTTP/2
// would carry every later request on it past the proxy's routing and
// limits (h2c smuggling). Such a request goes upstream as a plain one.
func upgradeOf(r *http.Request) string {
	up := r.Header["Upgrade"]
	if len(up) != 1 || up[0] == "" || !r.ProtoAtLeast(1, 1) || httpguts.HeaderValuesContainsToken(up, "h2c") {
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

// newRequestID makes a random request id of 32 hex digits in b and returns
// it as a string backed by b, without a copy: b must be the request's own
// and never written again (a reqState's id is), and the string keeps it
// alive for as long as it is referenced.
func newRequestID(b *[32]byte) string {
	const hexdigits = "0123456789abcdef"
	a, c := rand.Uint64(), rand.Uint64()
	for i := 0; i < 16; i++ {
		b[i] = hexdigits[a>>(60-4*i)&0xf]
		b[16+i] = hexdigits[c>>(60-4*i)&0xf]
	}
	return unsafe.String(&b[0], len(b))
}

// copyResponseHeader copies the upstream's response header to the client's
// without hop-by-hop fields (RFC 9110 7.6.1): Connection and every field
// it names (h1.Client keeps Connection even when it says close), the
// fields hop-by-hop by definition, and Proxy-Authenticate and
// Proxy-Authorization, which are for the proxy, not the client. Values are
// shared, not copied: the upstream's header is not used again.
func copyResponseHeader(dst, src http.Header) {
	conn := h1.ConnectionNames(src["Connection"])
	for k, vv := range src {
		if !h1.HopByHopResponseField(k, conn) {
			dst[k] = vv
		}
	}
}
