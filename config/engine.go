package config

import "runtime"

// The engines of a listener (Listener.Engine): the HTTP/1.1 engine of an
// http listener, the connection engine of a tcp listener.
const (
	// EngineAuto (the default, also written as nothing) is the event
	// loop where it can serve the listener (Linux, no tls), the
	// goroutine engine elsewhere.
	EngineAuto      = "auto"
	EngineGoroutine = "goroutine"
	EngineEventLoop = "eventloop"
)

// EventLoop reports whether listener l's engine is the event loop: named,
// or by default (auto) on Linux for an http listener without tls or a tcp
// listener without tls_passthrough and proxy_protocol.accept. (The proxy
// may still keep a listener whose every request the loop would hand over,
// one with tracing on say, on the goroutine engine: see
// proxy/httpproxy.)
func (l *Listener) EventLoop() bool {
	switch l.Engine {
	case EngineEventLoop:
		return true
	case "", EngineAuto:
		if l.Protocol == "tcp" {
			return runtime.GOOS == "linux" && tcpLoopMissing(l) == ""
		}
		return l.TLS == nil && runtime.GOOS == "linux"
	}
	return false
}

// tcpLoopMissing names the key of tcp listener l whose feature the event
// loop does not have (proxy/tcpproxy reads no ClientHello and no PROXY
// header on the loop), or "".
func tcpLoopMissing(l *Listener) string {
	switch {
	case l.TLSPassthrough || len(l.SNI) > 0:
		return "tls_passthrough"
	case l.ProxyProtocol != nil && l.ProxyProtocol.Accept:
		return "proxy_protocol.accept"
	}
	return ""
}

// checkTCPEngine checks a tcp listener's engine: a known one, and the
// event loop only on Linux and without the features it does not do.
func (v *validator) checkTCPEngine(l *Listener) {
	switch l.Engine {
	case "", EngineAuto, EngineGoroutine:
	case EngineEventLoop:
		if runtime.GOOS != "linux" {
			v.errorf(&l.Engine, "engine: eventloop needs Linux (epoll); this is %s", runtime.GOOS)
		} else if f := tcpLoopMissing(l); f != "" {
			v.errorf(&l.Engine, "engine: eventloop does not do %s (it reads nothing of a connection before forwarding it); such a tcp listener runs on the goroutine engine (auto or goroutine)", f)
		}
	default:
		v.errorf(&l.Engine, "unknown engine %q (known: auto, goroutine, eventloop)", l.Engine)
	}
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
