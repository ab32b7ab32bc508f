package config

import "runtime"

// The HTTP/1.1 engines of a listener (Listener.Engine).
const (
	EngineGoroutine = "goroutine"
	EngineEventLoop = "eventloop"
)

// checkEngine checks an http listener's engine: a known one, and the
// event loop only on Linux and without tls (TLS stays on the goroutine
// engine, which crypto/tls needs).
func (v *validator) checkEngine(l *Listener) {
	switch l.Engine {
	case "", EngineGoroutine:
	case EngineEventLoop:
		switch {
		case l.TLS != nil:
			v.errorf(&l.Engine, "engine: eventloop is for listeners without tls; a TLS listener runs on the goroutine engine")
		case runtime.GOOS != "linux":
			v.errorf(&l.Engine, "engine: eventloop needs Linux (epoll); this is %s", runtime.GOOS)
		}
	default:
		v.errorf(&l.Engine, "unknown engine %q (known: goroutine, eventloop)", l.Engine)
	}
}
