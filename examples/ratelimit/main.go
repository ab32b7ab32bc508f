// Command ratelimit shows two client-side rate limits in front of calls to
// a server, both token buckets of 50 calls per second with a burst of 5:
//
//   - one that waits: each call blocks until the bucket has a token, as
//     golang.org/x/time/rate's Limiter.Wait does, so every call goes
//     through, spread out to the rate;
//   - one that rejects: a call over the limit fails at once with
//     ratelimit.ErrLimited (and says when to retry), so the caller can shed
//     it or fall back, and the server never sees it.
//
// The program prints counts and ratios of elapsed to expected time rather
// than raw timings, which vary from machine to machine.
//
// Run it with:
//
//	go run ./examples/ratelimit
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/ratelimit"
)

const (
	calls = 25
	burst = 5
)

var rate = ratelimit.Rate{N: 50, Per: time.Second}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The server counts what reaches it.
	var served atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	call := func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	fmt.Printf("limit: %v, burst %d; %d calls each way\n", rate, burst, calls)

	// 1. Waiting: every call goes through, at the rate.
	waiting := ratelimit.NewTokenBucket(rate, burst)
	start := time.Now()
	for range calls {
		if err := acquire(ctx, waiting); err != nil {
			return err
		}
		if err := call(); err != nil {
			return err
		}
	}
	waited := time.Since(start)
	// The burst goes at once; the rest come one interval apart.
	expected := time.Duration(calls-burst) * rate.Interval()
	fmt.Printf("waiting:   %d of %d calls reached the server, in %.1fx the %v the rate allows\n",
		served.Load(), calls, float64(waited)/float64(expected), expected)

	// 2. Rejecting: the burst goes through, the rest fail at once.
	served.Store(0)
	rejecting := ratelimit.NewTokenBucket(rate, burst)
	var admitted, rejected int
	var retryAfter time.Duration
	start = time.Now()
	for range calls {
		err := tryAcquire(rejecting)
		var limited *limitedError
		switch {
		case errors.As(err, &limited):
			rejected++
			retryAfter = limited.retryAfter
			continue
		case err != nil:
			return err
		}
		admitted++
		if err := call(); err != nil {
			return err
		}
	}
	took := time.Since(start)
	fmt.Printf("rejecting: %d admitted, %d rejected with ErrLimited; %d reached the server\n", admitted, rejected, served.Load())
	fmt.Printf("rejecting: all %d calls decided at once (in under a tenth of the waiting client's time): %v\n",
		calls, took < waited/10)
	fmt.Printf("rejecting: the last rejection asked to retry within one token interval (%v): %v\n",
		rate.Interval(), retryAfter > 0 && retryAfter <= rate.Interval())

	// A rejected caller that honours RetryAfter is admitted.
	if err := ratelimit.Sleep(ctx, retryAfter); err != nil {
		return err
	}
	fmt.Println("rejecting: after waiting RetryAfter, the next call is admitted:", tryAcquire(rejecting) == nil)
	return nil
}

// acquire blocks until l admits one call, like x/time/rate's Wait: the
// token bucket reserves the token and ratelimit.Wait sleeps until it is due
// (giving it back if ctx ends first).
func acquire(ctx context.Context, l ratelimit.Limiter) error {
	_, err := ratelimit.Wait(ctx, l, 1)
	return err
}

// limitedError is ErrLimited with the time the limiter asks the caller to
// wait before trying again.
type limitedError struct{ retryAfter time.Duration }

func (e *limitedError) Error() string {
	return fmt.Sprintf("%v: retry after %v", ratelimit.ErrLimited, e.retryAfter)
}
func (e *limitedError) Unwrap() error { return ratelimit.ErrLimited }

// tryAcquire admits one call or fails at once with an error wrapping
// ratelimit.ErrLimited.
func tryAcquire(l ratelimit.Limiter) error {
	if res := l.AllowN(time.Now(), 1); !res.Allowed {
		return &limitedError{retryAfter: res.RetryAfter}
	}
	return nil
}
