package pipeline

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// Step is what a call needs next from the front end driving it step by
// step (Route.Begin). The details of a step are the call's: Attempt for a
// StepSend, WaitUntil for a StepWait, Result for a StepDone.
type Step uint8

const (
	// StepDone: the call has its answer, Call.Result: the response to
	// relay (the upstream's, or a fallback step's when Call.Degraded) or
	// an *Error. Then Finish, exactly as after Do.
	StepDone Step = iota
	// StepSend: send the attempt Call.Attempt describes as
	// Transport.RoundTrip would, and report how it went with
	// Call.Answered once the response head is in or the attempt failed.
	StepSend
	// StepWait: nothing to do before Call.WaitUntil (a leaky bucket's
	// delay, a retry's backoff). Arm a timer, then call Call.Resume; call
	// it early when the request's context ends, and the call ends with
	// it.
	StepWait
	// StepBlock: the call's next part can only be done blocking: waiting
	// in a concurrency queue, asking Redis for a global rate limit,
	// hedging (two attempts raced on goroutines through the route's
	// Transport), a fallback chain with a backup step (a request to
	// another upstream). Call Call.Block where blocking is fine (an event
	// loop: on a goroutine of its own); it returns the next step.
	StepBlock
)

func (s Step) String() string {
	switch s {
	case StepDone:
		return "done"
	case StepSend:
		return "send"
	case StepWait:
		return "wait"
	case StepBlock:
		return "block"
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// next is what a call's next Answered, Resume or Block continues with.
type next uint8

const (
	nextNone      next = iota
	awaitAnswer        // a StepSend is out: Answered
	resumeAdmit        // a leaky bucket's delay is waited: Resume
	resumeRetry        // a retry's backoff is waited: Resume
	blockAdmit         // the rate limits include a global one (Redis): Block
	blockEnter         // a concurrency limit has a queue to wait in: Block
	blockHedge         // the attempt is hedged: Block
	blockFallback      // the fallback chain has a backup step: Block
)

// Begin starts c through the route without blocking, for a front end that
// cannot block (an event loop): it runs what Do runs, up to the first
// thing that needs the front end, and returns that step. The front end
// carries out each step and hands its end back: Answered after a
// StepSend, Resume after a StepWait, Block for a StepBlock; each returns
// the next step, until StepDone. Then Finish, as after Do. Do is this same
// loop, carried out blocking.
//
// The common path, a call answered on its first try, is Begin (StepSend),
// Answered (StepDone) and Finish, with no goroutine, no timer and nothing
// allocated by the pipeline. A call's methods are called one at a time,
// each after the previous one returned, but not necessarily on the same
// goroutine (Block on its own, the rest on the loop).
//
// The route's Transport is still used by the blocking parts: a hedge
// races two attempts through it, and a backup fallback step sends through
// the backup upstream's.
//
// A front end that gives up on a call midway (its client went away) ends
// the request's context and still takes the call to StepDone: it reports
// an attempt in flight to Answered with the error, calls Resume at once
// for a wait and lets a Block return; then Finish. A call left at
// StepSend would leave its endpoint counting an attempt in flight.
func (r *Route) Begin(c *Call, now time.Time) Step {
	// Cleared in place, not assigned a composite literal: that is built
	// on the stack and copied over, which cost a tenth of BenchmarkDo.
	req, body, upgrade, key, hasKey, prefer, front := c.Req, c.Body, c.Upgrade, c.HashKey, c.HasHashKey, c.Prefer, c.Front
	*c = Call{}
	c.Req, c.Body, c.Upgrade, c.HashKey, c.HasHashKey, c.Prefer, c.Front = req, body, upgrade, key, hasKey, prefer, front
	c.route, c.start = r, now
	if r.cfg.Timeout > 0 {
		c.deadline = now.Add(r.cfg.Timeout)
	}
	return c.admit(now)
}

// Attempt is the attempt of a StepSend: the endpoint to send to, its
// deadline (the per-try timeout's or the route's, whichever comes first;
// zero for none), bounding the whole exchange, response body included,
// and the body to send (nil for none; every attempt gets a reader of its
// own, from the body's first byte). The request's context ends the
// attempt early.
func (c *Call) Attempt() (ep *endpoint.Endpoint, deadline time.Time, body io.Reader) {
	return c.att.pick.Endpoint, c.att.deadline, c.att.body
}

// Answered reports the outcome of the attempt of the last StepSend: its
// response once the head is in, or the error that ended it (exactly one
// of the two), as Transport.RoundTrip returns them; now is when it came.
// It returns the next step: StepDone with the answer to relay, or a
// retry (StepSend, after StepWait for its backoff), or the fallback chain
// (StepBlock when it has a backup step). A front end that gives up on an
// attempt (its client went away) still reports it, with the error, so
// that the endpoint is not left counting it in flight.
//
// A response dropped for a retry (a status the policy retries) is closed
// after reading at most 64 KiB of its body, stopping at the first error:
// a body that cannot be read without blocking may return an error from
// Read and deal with the rest of itself in Close.
func (c *Call) Answered(resp *http.Response, err error, now time.Time) Step {
	if c.next != awaitAnswer {
		panic("pipeline: Call.Answered without a StepSend to answer")
	}
	c.next = nextNone
	return c.sent(resp, err, now)
}

// WaitUntil is when the wait of a StepWait ends.
func (c *Call) WaitUntil() time.Time { return c.until }

// Resume goes on after a StepWait, at or after WaitUntil, or earlier when
// the request's context has ended: then the call ends (StepDone) as a
// call whose caller went away, or whose retry found no time left.
func (c *Call) Resume(now time.Time) Step {
	n := c.next
	c.next = nextNone
	switch n {
	case resumeAdmit:
		if err := c.Req.Context().Err(); err != nil {
			return c.fail(clientClosed(err))
		}
		return c.enter(now)
	case resumeRetry:
		return c.retryNow(now)
	}
	panic("pipeline: Call.Resume without a StepWait to resume")
}

// Block does the part of the call a StepBlock announced, blocking until it
// is done (or the request's context ends), and returns the next step. It
// is the only method of a call that blocks.
func (c *Call) Block() Step {
	r := c.route
	n := c.next
	c.next = nextNone
	switch n {
	case blockAdmit:
		delay, err := r.rateLimit(c)
		return c.admitted(delay, err, time.Now())
	case blockEnter:
		if err := c.enterQueued(); err != nil {
			return c.fail(err)
		}
		return c.checkBreaker(time.Now())
	case blockHedge:
		resp, err := r.hedge(c, &c.att, c.hedgeAfter)
		return c.sent(resp, err, time.Now())
	case blockFallback:
		return c.serveFallback(time.Now())
	}
	panic("pipeline: Call.Block without a StepBlock to do")
}

// Result is the answer of a StepDone: the response to relay, or an *Error.
func (c *Call) Result() (*http.Response, error) {
	if c.failure != nil {
		return nil, c.failure
	}
	return c.resp, nil
}

// block announces a blocking part of the call: Block does it.
func (c *Call) block(n next) Step {
	c.next = n
	return StepBlock
}

// wait announces a wait until t: Resume goes on.
func (c *Call) wait(t time.Time) Step {
	c.until = t
	return StepWait
}

// answer ends the call with resp.
func (c *Call) answer(resp *http.Response) Step {
	c.resp = resp
	return StepDone
}

// fail ends the call with err.
func (c *Call) fail(err *Error) Step {
	c.failure = err
	return StepDone
}
