//go:build linux

package h1loop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/evloop"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// exchange is one request served on a loop: the pipeline call, the
// attempt in flight and the relay of its answer. A connection has one,
// reset for each of its requests.
type exchange struct {
	c     *conn
	req   *http.Request
	x     Exchange
	route *pipeline.Route
	call  *pipeline.Call
	up    Upstream
	timer evloop.Timer // a StepWait's end

	att     *attempt // the attempt in flight, or nil
	atts    attempt  // what att points to: one attempt at a time
	blocked bool     // a StepBlock runs on a goroutine
	gone    bool     // the client went away
	done    bool
	// reported: Done was called. It is called before the last bytes of
	// the answer go to the client, so that a client that sends its next
	// request at once finds the call's slots (concurrency) given back.
	reported bool

	// The relay of the answer.
	resp       *http.Response
	status     int
	src        *attempt // the attempt whose response is relayed; nil for one the pipeline made
	out        int64    // body bytes written to the client
	bodyErr    error
	closeAfter bool

	// cancel ends the call's own context, when offLoop made one.
	cancel context.CancelFunc

	// reqBuf backs the request as it goes upstream (writeRequest).
	reqBuf []byte
	// respRu is the memory of the exchange's first response (its header
	// map, its text: h1.Reuse), reused from one exchange to the next;
	// later attempts' responses get their own (a dropped response may
	// still be held by the call). parsedRu: the first one was parsed.
	respRu   h1.Reuse
	parsedRu bool
}

// reset readies the connection's exchange for request req, which x
// serves.
func (ex *exchange) reset(c *conn, req *http.Request, x Exchange) *exchange {
	// The attempt's deadline is kept as it is: its timer may be armed
	// (see evloop.Deadline).
	gen, fire, adl := ex.atts.gen, ex.timer.Fire, ex.atts.timer
	*ex = exchange{c: c, x: x, reqBuf: ex.reqBuf[:0], respRu: ex.respRu}
	ex.atts.gen, ex.atts.timer = gen, adl
	if fire == nil {
		fire = ex.resume // made once: a method value costs an allocation
	}
	ex.timer.Fire = fire
	route, call, up := x.Call()
	ex.route, ex.call, ex.up = route, call, up
	ex.req = call.Req
	ex.closeAfter = req.Close
	return ex
}

func (ex *exchange) now() time.Time { return ex.c.lp.now() }

// start runs the call to its first step.
func (ex *exchange) start(now time.Time) {
	ex.step(ex.route.Begin(ex.call, now))
}

// step carries out step s of the call.
func (ex *exchange) step(s pipeline.Step) {
	if a := ex.src; a != nil && a.dropped.Load() {
		// The call dropped the response (a retry, a fallback).
		a.release(false)
		ex.src = nil
	}
	switch s {
	case pipeline.StepSend:
		ep, deadline, body := ex.call.Attempt()
		ex.send(ep.Address(), deadline, body)
	case pipeline.StepWait:
		if ex.gone {
			ex.step(ex.call.Resume(ex.now()))
			return
		}
		ex.c.lp.l.Arm(&ex.timer, ex.call.WaitUntil())
	case pipeline.StepBlock:
		ex.blocked = true
		ex.offLoop()
		l := ex.c.lp.l
		go func() {
			s := ex.call.Block()
			l.Post(func() {
				ex.blocked = false
				ex.step(s)
			})
		}()
	case pipeline.StepDone:
		ex.answer()
	}
}

// offLoop readies the exchange for work on other goroutines (a blocking
// step, a response the pipeline made): the call gets a context of its own,
// ended when the exchange ends (a hedge's losing attempt may still run
// then, on the connection's context it would never end), and the
// exchange's state is not reused by the connection's next request, which
// such a straggler may still read (finish).
func (ex *exchange) offLoop() {
	if ex.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(ex.c.ctx)
	ex.cancel = cancel
	ex.call.Req = ex.call.Req.WithContext(ctx)
	ex.req = ex.call.Req
}

// resume goes on after a StepWait.
func (ex *exchange) resume() { ex.step(ex.call.Resume(ex.now())) }

// send makes an attempt to addr.
func (ex *exchange) send(addr string, deadline time.Time, body io.Reader) {
	var b []byte
	if body != nil {
		// The loop takes only bodies it holds whole: reading one blocks
		// on nothing.
		var err error
		if b, err = io.ReadAll(body); err != nil {
			ex.answered(nil, errors.Join(pipeline.ErrRequestBody, err))
			return
		}
	}
	ex.reqBuf = writeRequest(ex.reqBuf[:0], ex.req, b)
	ex.att = ex.atts.reset(ex, addr, deadline, ex.reqBuf)
	ex.att.start()
}

// answered hands the outcome of the attempt in flight to the call.
func (ex *exchange) answered(resp *http.Response, err error) {
	if ex.up.Header != nil && resp != nil && ex.att != nil {
		ex.up.Header.Observe(ex.now().Sub(ex.att.t0).Seconds())
	}
	if err != nil && ex.att != nil {
		ex.att.release(false)
	}
	if err == nil {
		ex.src = ex.att
	}
	ex.att = nil
	ex.step(ex.call.Answered(resp, err, ex.now()))
}

// answer relays the call's answer: the response, or the proxy's error.
func (ex *exchange) answer() {
	resp, err := ex.call.Result()
	if err != nil {
		status, hdr, body := ex.x.Fail(err)
		ex.status = status
		if ex.gone || status == pipeline.StatusClientClosed {
			ex.status = pipeline.StatusClientClosed
			ex.finish()
			return
		}
		ex.report()
		ex.writeHead(status, "", hdr, int64(len(body)), false)
		ex.c.write(body)
		ex.bodyDone(nil)
		return
	}
	ex.resp = resp
	ex.status = resp.StatusCode
	if ex.src == nil || ex.src.resp != resp {
		// Not the response of the loop's last attempt (a fallback step's,
		// or its stale copy): the pipeline made it; read it whole on a
		// goroutine, as its body may block.
		if ex.src != nil {
			ex.src.release(false)
			ex.src = nil
		}
		ex.relayMade(resp)
		return
	}
	if ex.gone {
		ex.src.release(false)
		ex.src = nil
		ex.status = pipeline.StatusClientClosed
		ex.finish()
		return
	}
	a := ex.src
	switch a.mode {
	case bodyNone:
		hdr := ex.x.Respond(resp)
		a.release(a.reusable)
		ex.src = nil
		ex.writeHead(resp.StatusCode, resp.Status, hdr, -2, false)
		ex.bodyDone(nil) // Done, then the head
		return
	case bodyLength:
		ex.writeHead(resp.StatusCode, resp.Status, ex.x.Respond(resp), a.left, false)
	case bodyChunked:
		ex.writeHead(resp.StatusCode, resp.Status, ex.x.Respond(resp), -1, true)
	case bodyToClose:
		ex.closeAfter = true
		ex.writeHead(resp.StatusCode, resp.Status, ex.x.Respond(resp), -1, false)
	}
	a.relay()
}

// relayMade relays a response the pipeline made (not read from a loop
// connection): its body is read whole on a goroutine.
func (ex *exchange) relayMade(resp *http.Response) {
	ex.blocked = true
	ex.offLoop()
	l := ex.c.lp.l
	go func() {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		l.Post(func() {
			ex.blocked = false
			if ex.gone {
				ex.status = pipeline.StatusClientClosed
				ex.finish()
				return
			}
			if err != nil {
				// Nothing is sent yet: the client sees a cut connection
				// rather than a complete-looking truncated answer.
				ex.bodyErr = err
				ex.closeAfter = true
				ex.finish()
				return
			}
			// The response is the pipeline's, maybe shared (a fallback
			// step's): Respond gets a copy of it to change.
			own := *resp
			own.Header = resp.Header.Clone()
			hdr := ex.x.Respond(&own)
			ex.out = int64(len(b))
			ex.report()
			ex.writeHead(resp.StatusCode, resp.Status, hdr, int64(len(b)), false)
			ex.c.write(b)
			ex.bodyDone(nil)
		})
	}()
}

// writeHead puts the response head before what goes to the client next
// (the body's first bytes, in the same write; bodyDone sends a head with
// no body): the status line, hdr, and the framing: Content-Length length
// (-1: none; -2: the bodyless answer's own fields kept), or
// Transfer-Encoding: chunked.
func (ex *exchange) writeHead(code int, status string, hdr http.Header, length int64, chunked bool) {
	c := ex.c
	if c.lp.s.closing.Load() {
		ex.closeAfter = true
	}
	b := append(c.out, "HTTP/1.1 "...)
	if len(status) < 4 || status[3] != ' ' || int(status[0]-'0')*100+int(status[1]-'0')*10+int(status[2]-'0') != code {
		b = strconv.AppendInt(b, int64(code), 10)
		b = append(b, ' ')
		b = append(b, http.StatusText(code)...)
	} else {
		b = append(b, status...)
	}
	b = append(b, "\r\n"...)
	keepLength := length == -2 && code >= 200 && code != http.StatusNoContent
	conn := h1.ConnectionNames(hdr["Connection"])
	for k, vv := range hdr {
		if k == "Content-Length" && !keepLength || h1.HopByHopResponseField(k, conn) {
			continue // the loop frames the answer itself
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if _, ok := hdr["Date"]; !ok {
		b = append(b, "Date: "...)
		b = append(b, c.lp.dateValue()...)
		b = append(b, "\r\n"...)
	}
	switch {
	case chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case length >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, length, 10)
		b = append(b, "\r\n"...)
	}
	if ex.closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	c.out = append(b, "\r\n"...)
}

// bodyDone ends the relay of the response: once the client has taken it
// all, the exchange finishes.
func (ex *exchange) bodyDone(err error) {
	if err != nil {
		ex.bodyErr = err
		ex.closeAfter = true
	}
	ex.done = true
	// The call ends before the client can have the answer's last bytes
	// (report): here when nothing was written yet (a head with an empty
	// body, sent by the flush below).
	ex.report()
	if !ex.c.flush() {
		return
	}
	if len(ex.c.out) == 0 {
		ex.finish()
		return
	}
	// The client has yet to take the last bytes: it gets as long as a
	// paused relay's client does.
	ex.clientStalled()
}

// clientDrained is called when the client took all that was pending.
func (ex *exchange) clientDrained() {
	if ex.done {
		ex.finish()
		return
	}
	ex.c.lp.l.SetDeadline(&ex.c.timer, time.Time{})
	if ex.src != nil {
		ex.src.resumeRelay()
	}
}

// clientStalled is called when the client's socket is full: the relay
// stops reading the upstream until it drains, for up to the idle timeout.
func (ex *exchange) clientStalled() {
	if d := ex.c.settings().IdleTimeout; d > 0 {
		ex.c.lp.l.SetDeadline(&ex.c.timer, ex.now().Add(d))
	}
}

// clientGone ends the exchange of a client that went away or stopped
// reading: an attempt in flight is reported failed, a wait ends at once, a
// relay stops; the call still runs to its end.
func (ex *exchange) clientGone() {
	if ex.gone {
		return
	}
	ex.gone = true
	ex.closeAfter = true
	c := ex.c
	c.cancel()
	c.out = c.out[:0]
	switch {
	case ex.att != nil:
		ex.answered(nil, context.Canceled)
	case ex.timer.Armed():
		c.lp.l.Disarm(&ex.timer)
		ex.resume()
	case ex.blocked:
		// The goroutine sees the context end; its Post goes on.
	case ex.src != nil && ex.resp != nil:
		ex.src.release(false)
		ex.src = nil
		if ex.status < 400 && !ex.done {
			ex.bodyErr = context.Canceled
		}
		ex.finish()
	default:
		ex.finish()
	}
}

// abort ends the exchange at once (the server is closing).
func (ex *exchange) abort(err error) {
	ex.clientGone()
}

// report ends the call: Done, once.
func (ex *exchange) report() {
	if ex.reported {
		return
	}
	ex.reported = true
	status := ex.status
	if ex.gone && (!ex.done || status == 0) {
		status = pipeline.StatusClientClosed
	}
	ex.x.Done(status, ex.req.ContentLength, ex.out, ex.bodyErr, ex.now())
}

// finish ends the exchange: Done, and the connection goes on to its next
// request or closes.
func (ex *exchange) finish() {
	if ex.call == nil {
		return
	}
	c := ex.c
	c.lp.l.Disarm(&ex.timer)
	ex.report()
	ex.call = nil
	c.ex = nil
	if ex.cancel != nil {
		// Work went off the loop: end it, and give the next request
		// state of its own (see offLoop).
		ex.cancel()
		c.lastX = nil
		c.ru = h1.Reuse{Base: c.ru.Base}
		ex.respRu = h1.Reuse{}
	}
	if ex.closeAfter || ex.gone {
		c.close()
		return
	}
	c.lp.l.SetDeadline(&c.timer, time.Time{})
	// A next head already begun in c.in is read from now on (as net/http
	// times a request's head from when it starts reading it), not from
	// when its first bytes came: the exchange's time is not its own.
	c.headStart = c.lp.now()
	// The next request (pipelined, in c.in, or to come) once the stack
	// that finished this one has unwound: its frames may still look at
	// the exchange the next request reuses.
	c.lp.l.Soon(c)
}

// RunSoon serves the connection's next request after an exchange ended
// (finish).
func (c *conn) RunSoon() {
	if !c.closed && c.ex == nil {
		c.serve()
	}
}
