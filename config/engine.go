package config

import "runtime"

// The HTTP/1.1 engines of a listener (Listener.Engine).
const (
	// EngineAuto (the default, also written as nothing) is the event
	// loop where it can serve the listener (Linux, no tls), the
	// goroutine engine elsewhere.
	EngineAuto      = "auto"
	EngineGoroutine = "goroutine"
	EngineEventLoop = "eventloop"
)

// EventLoop reports whether listener l's engine is the event loop: named,
// or by default (auto) on Linux for a listener without tls. (The proxy
// may still keep a listener whose every request the loop would hand over,
// one with tracing on say, on the goroutine engine: see
// proxy/httpproxy.)
func (l *Listener) EventLoop() bool {
	switch l.Engine {
	case EngineEventLoop:
		return true
	case "", EngineAuto:
		return l.TLS == nil && runtime.GOOS == "linux"
	}
	return false
}

// checkEngine checks an http listener's engine: a known one, and the
// event loop only on Linux and without tls (TLS stays on the goroutine
// engine, which crypto/tls needs).
func (v *validator) checkEngine(l *Listener) {
	switch l.Engine {
	case "", EngineAuto, EngineGoroutine:
	case EngineEventLoop:
		switch {
		case l.TLS != nil:
			v.errorf(&l.Engine, "engine: eventloop is for listeners without tls; a TLS listener runs on the goroutine engine")
		case runtime.GOOS != "linux":
			v.errorf(&l.Engine, "engine: eventloop needs Linux (epoll); this is %s", runtime.GOOS)
		}
	default:
		v.errorf(&l.Engine, "unknown engine %q (known: auto, goroutine, eventloop)", l.Engine)
	}
}
