package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Server runs the tcp listeners of a configuration and moves them to a new
// one: a listener whose address is kept keeps its socket and its
// connections and takes the new settings for new connections; a new one
// is bound before anything changes; a removed one drains.
type Server struct {
	log       *slog.Logger
	m         *Metrics
	upstreams func(name string) Upstream

	mu        sync.Mutex // serialises changes and Shutdown
	listeners map[string]*running
	drain     time.Duration
	draining  sync.WaitGroup // listeners removed by a change, still finishing
	closed    bool
}

// running is a served listener.
type running struct {
	name string
	addr string // as configured
	l    *Listener
	done chan struct{} // closed when Serve returns
}

// Spec is one tcp listener of a configuration: its address and settings.
type Spec struct {
	Listen string
	Config Config
}

// NewServer returns a server with no listeners; upstreams resolves an
// upstream's name for each new connection.
func NewServer(upstreams func(name string) Upstream, m *Metrics, log *slog.Logger) *Server {
	return &Server{log: log, m: m, upstreams: upstreams, listeners: map[string]*running{}}
}

// Change is a prepared set of tcp listeners: Commit applies it, Discard
// drops it. Exactly one of them must be called.
type Change struct {
	s     *Server
	plans []*tcpPlan
	drain time.Duration
}

// tcpPlan is a listener to be kept (with new settings) or started.
type tcpPlan struct {
	spec Spec
	old  *running  // kept, or nil
	next *Listener // a new listener on a new socket, or nil
}

// Prepare validates specs and binds the new sockets; nothing running
// changes. drain bounds how long a removed listener's connections may
// finish.
func (s *Server) Prepare(specs []Spec, drain time.Duration) (*Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("tcp server is shut down")
	}
	c := &Change{s: s, drain: drain}
	for _, sp := range specs {
		p := &tcpPlan{spec: sp}
		if err := sp.Config.Validate(); err != nil {
			c.Discard()
			return nil, fmt.Errorf("listener %q: %w", sp.Config.Name, err)
		}
		old := s.listeners[sp.Config.Name]
		if old != nil && old.addr == sp.Listen && old.l.Engine() == sp.Config.EngineName() {
			p.old = old
			c.plans = append(c.plans, p)
			continue
		}
		var ln *net.TCPListener
		var err error
		if old != nil && old.addr == sp.Listen {
			// Another engine: a new Listener on the same socket (a
			// duplicate of its descriptor), so that no connection waiting
			// to be accepted is lost; the old one drains as a removed
			// listener does.
			if ln, err = old.l.dupSocket(); err != nil {
				err = fmt.Errorf("engine: %w", err)
			}
		} else {
			// Listen leaves keep-alive off on accepted sockets: the idle
			// timeout guards them, without 4 setsockopt calls per
			// connection.
			ln, err = Listen(context.Background(), sp.Listen)
		}
		if err == nil {
			if p.next, err = NewListener(ln, sp.Config, s.upstreams, s.m, s.log); err != nil {
				ln.Close()
			}
		}
		if err != nil {
			c.Discard()
			return nil, fmt.Errorf("listener %q: %w", sp.Config.Name, err)
		}
		c.plans = append(c.plans, p)
	}
	return c, nil
}

// Discard closes what the change bound.
func (c *Change) Discard() {
	for _, p := range c.plans {
		if p.next != nil {
			// Never served: it closes its socket and lets go of its
			// metric series at once.
			p.next.Shutdown(context.Background())
		}
	}
}

// Commit starts the new listeners, updates the kept ones and drains the
// removed ones (in the background, up to the drain time).
func (c *Change) Commit() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drain = c.drain
	next := make(map[string]*running, len(c.plans))
	for _, p := range c.plans {
		name := p.spec.Config.Name
		if p.old != nil {
			if err := p.old.l.Update(p.spec.Config); err != nil { // validated in Prepare
				s.log.Error("tcp listener: update failed; it keeps its settings", "listener", name, "err", err)
			}
			next[name] = p.old
			continue
		}
		r := &running{name: name, addr: p.spec.Listen, l: p.next, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			if err := r.l.Serve(); err != nil {
				s.log.Error("tcp listener stopped", "listener", r.name, "err", err)
			}
		}()
		next[name] = r
	}
	for name, r := range s.listeners {
		if next[name] != r {
			if n := next[name]; n != nil && n.addr == r.addr {
				s.log.Info("tcp listener engine changed; the old engine's connections drain", "listener", name, "from", r.l.Engine(), "to", n.l.Engine())
			} else {
				s.log.Info("tcp listener removed, draining", "listener", name, "listen", r.addr)
			}
			s.draining.Add(1)
			go func() {
				defer s.draining.Done()
				r.shutdown(c.drain)
			}()
		}
	}
	s.listeners = next
}

// Shutdown stops accepting on every listener and lets connections finish
// up to the drain time; it returns once everything has stopped.
func (s *Server) Shutdown() {
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.listeners = map[string]*running{}
	timeout := s.drain
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.shutdown(timeout)
		}()
	}
	wg.Wait()
	s.draining.Wait()
}

// shutdown stops accepting and lets connections finish up to timeout.
func (r *running) shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r.l.Shutdown(ctx)
	<-r.done
}

// Addr returns the bound address of the named listener, or "".
func (s *Server) Addr(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.listeners[name]; r != nil {
		return r.l.Addr().String()
	}
	return ""
}

// Engine is the engine the named listener runs on (EngineEventLoop or
// EngineGoroutine), or "".
func (s *Server) Engine(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.listeners[name]; r != nil {
		return r.l.Engine()
	}
	return ""
}

// Stats returns every listener's statistics, for the admin API.
func (s *Server) Stats() []Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Stats, 0, len(s.listeners))
	for _, r := range s.listeners {
		out = append(out, r.l.Stats())
	}
	return out
}
