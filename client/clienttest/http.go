package clienttest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
)

// HealthPath is the path of an HTTP server's health endpoint, which the
// registry's check calls. Requests to it are not counted, slowed or failed:
// SetHealthy decides its answer.
const HealthPath = "/healthz"

// InstanceHeader is the response header in which an HTTP server names
// itself (its instance ID), on every answer including injected failures,
// so a test sees which instance a request reached.
const InstanceHeader = "X-Clienttest-Instance"

// HTTPServer is one HTTP server of a test fleet on a loopback port. Its
// methods are safe for concurrent use, but those that can fail the test
// (Register, Deregister, Revive) must be called from the test's goroutine.
type HTTPServer struct {
	in *instance
}

// StartHTTP starts an HTTP server on 127.0.0.1 (a free port) and, when reg
// is not nil, registers it under opts.Service with an HTTP check of
// HealthPath and returns once the registry lists it passing. The server
// is stopped (and deregistered, if the registry runs) when the test ends.
func StartHTTP(tb testing.TB, reg *Registry, opts Options) *HTTPServer {
	tb.Helper()
	in, ln := newInstance(tb, reg, opts, "http")
	s := &HTTPServer{in: in}
	in.serve = s.serve
	in.start(ln)
	return s
}

// StartHTTPFleet starts n HTTP servers with StartHTTP and the same opts
// (each gets its own port and ID; opts.ID must be empty).
func StartHTTPFleet(tb testing.TB, reg *Registry, n int, opts Options) []*HTTPServer {
	tb.Helper()
	return startFleet(tb, n, opts, "HTTP", func() *HTTPServer { return StartHTTP(tb, reg, opts) })
}

func (s *HTTPServer) serve(ln net.Listener) func() {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	// Close closes the listener and every connection, idle or in the
	// middle of a request: what a crash does to the clients.
	return func() { srv.Close() }
}

func (s *HTTPServer) handle(w http.ResponseWriter, r *http.Request) {
	in := s.in
	w.Header().Set(InstanceHeader, in.id)
	if r.URL.Path == HealthPath {
		if in.healthy.Load() {
			io.WriteString(w, "ok\n")
		} else {
			http.Error(w, "clienttest: "+in.id+" is unhealthy", http.StatusServiceUnavailable)
		}
		return
	}
	in.requests.Add(1)
	f := in.faults.Load()
	if !in.delay(r.Context(), f.latency) {
		return
	}
	if f.failing {
		http.Error(w, fmt.Sprintf("clienttest: %s fails with %d", in.id, f.code), f.code)
		return
	}
	if in.opts.Handler != nil {
		in.opts.Handler.ServeHTTP(w, r)
		return
	}
	io.WriteString(w, in.id+"\n")
}

// ID is the instance ID the server registers under.
func (s *HTTPServer) ID() string { return s.in.id }

// Addr is the server's host:port; it stays the same across Kill and
// Revive.
func (s *HTTPServer) Addr() string { return s.in.addr }

// URL is "http://" + Addr.
func (s *HTTPServer) URL() string { return "http://" + s.in.addr }

// Instance is the server as the registry lists it.
func (s *HTTPServer) Instance() registry.Instance { return s.in.instance() }

// Requests counts the requests the server has received, whatever their
// fate (answered, failed, cut by Kill), health checks excepted.
func (s *HTTPServer) Requests() int64 { return s.in.requests.Load() }

// Slow adds d of latency to every request from now on, before it is
// answered or failed; 0 removes it. A request whose client gives up (or
// whose connection Kill closes) during the wait gets no answer.
func (s *HTTPServer) Slow(d time.Duration) { s.in.slow(d) }

// Fail makes every request from now on get status (e.g. 503), with a short
// text body naming the instance. Health checks still pass: the registry
// keeps listing the server, as it would a sick node whose health endpoint
// answers (see SetHealthy for the other case). A status that is not an
// error (outside 400-599) is a bug in the test: Fail panics.
func (s *HTTPServer) Fail(status int) {
	if status < 400 || status > 599 {
		panic(fmt.Sprintf("clienttest: Fail(%d): not an HTTP error status (400-599)", status))
	}
	s.in.fail(status)
}

// Heal removes the latency of Slow and the failure of Fail.
func (s *HTTPServer) Heal() { s.in.heal() }

// SetHealthy decides what HealthPath answers: 200 when true (the start),
// 503 when false, which turns the server critical in the registry at its
// next check, while requests are still served.
func (s *HTTPServer) SetHealthy(ok bool) { s.in.healthy.Store(ok) }

// Kill stops the server as a crash would: the listener and every live
// connection are closed, requests in progress are cut. The registration
// is left alone: the registry lists a dead target until its check fails
// (within CheckInterval; with NoCheck, never). Call Deregister first for a
// graceful shutdown. Killing a dead server does nothing.
func (s *HTTPServer) Kill() { s.in.kill() }

// Revive serves again on the same address, with the same faults and
// counter. If the server is registered and the registry runs, it returns
// once the registry lists it passing again. It does not register a server
// that was deregistered: call Register. Reviving a live server does
// nothing.
func (s *HTTPServer) Revive() { s.in.revive() }

// Alive reports whether the server is serving (not killed).
func (s *HTTPServer) Alive() bool { return s.in.alive() }

// Register registers the server (again) and waits until the registry lists
// it passing.
func (s *HTTPServer) Register() { s.in.register() }

// Deregister removes the server from the registry; it keeps serving.
func (s *HTTPServer) Deregister() { s.in.deregister() }
