package httpproxy

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/config"
	tcpproxy "github.com/switchboard-dev/switchboard/proxy/tcpproxy"
)

// The server runs tcp listeners beside the HTTP ones: they share the
// upstreams (pools, balancers, health checks, discovery), and reloads treat
// both alike. The forwarding itself is proxy/tcpproxy's.

// Pick chooses an endpoint for a TCP connection (tcpproxy.Upstream).
func (u *Upstream) Pick(info *balance.Info) (balance.Result, error) { return u.bal.Pick(info) }

// tcpListener is a running tcp listener.
type tcpListener struct {
	name string
	addr string // as configured
	l    *tcpproxy.Listener
	done chan struct{} // closed when Serve returns
}

// tcpConfig is the proxy/tcpproxy form of a validated tcp listener.
func tcpConfig(lc *config.Listener, ups map[string]*config.Upstream) tcpproxy.Config {
	c := tcpproxy.Config{
		Name:                lc.Name,
		Upstream:            lc.Upstream,
		SNITimeout:          lc.Timeouts.ReadHeader.Std(),
		ConnectAttempts:     lc.ConnectAttempts,
		IdleTimeout:         lc.Timeouts.Idle.Std(),
		MaxConns:            lc.MaxConns,
		MaxConnsPerEndpoint: lc.MaxConnsPerEndpoint,
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = tcpproxy.NoIdleTimeout
	}
	// A connect attempt is bounded by its upstream's timeouts.connect; with
	// SNI routes to several upstreams, by the longest of theirs.
	names := []string{lc.Upstream}
	for _, r := range lc.SNI {
		c.SNI = append(c.SNI, tcpproxy.SNIRoute{Names: r.Names, Upstream: r.Upstream})
		names = append(names, r.Upstream)
	}
	for _, n := range names {
		if u := ups[n]; u != nil {
			c.ConnectTimeout = max(c.ConnectTimeout, u.Timeouts.Connect.Std())
		}
	}
	if q := lc.Queue; q != nil {
		c.QueueSize, c.QueueTimeout = q.Size, q.Timeout.Std()
	}
	if p := lc.ProxyProtocol; p != nil {
		c.SendProxyProtocol = p.Send
		c.AcceptProxyProtocol = p.Accept
		c.TrustedProxies = config.ParsePrefixes(p.TrustedProxies)
		c.ProxyProtocolTimeout = lc.Timeouts.ReadHeader.Std()
	}
	return c
}

// tcpUpstream resolves an upstream's name for a new TCP connection.
func (s *Server) tcpUpstream(name string) tcpproxy.Upstream {
	if u := (*s.byName.Load())[name]; u != nil {
		return u
	}
	return nil
}

// tcpPlan is a tcp listener to be kept (with new settings) or started.
type tcpPlan struct {
	cfg  tcpproxy.Config
	addr string             // listen, as configured
	old  *tcpListener       // kept, or nil
	ln   *net.TCPListener   // a new socket, or nil
	next *tcpproxy.Listener // the new listener on ln
}

// prepareTCP validates the tcp listeners of cfg and binds the new sockets.
// Nothing running changes; undo releases what it bound.
func (s *Server) prepareTCP(cfg *config.Config) (plans []*tcpPlan, undo func(), err error) {
	undo = func() {
		for _, p := range plans {
			switch {
			case p.next != nil:
				// Never served: it closes its socket and lets go of its
				// metric series at once.
				p.next.Shutdown(context.Background())
			case p.ln != nil:
				p.ln.Close()
			}
		}
	}
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		if lc.Protocol != "tcp" {
			continue
		}
		p := &tcpPlan{cfg: tcpConfig(lc, cfg.Upstreams), addr: lc.Listen}
		if err := p.cfg.Validate(); err != nil {
			undo()
			return nil, nil, fmt.Errorf("listener %q: %w", lc.Name, err)
		}
		if old := s.tcp[lc.Name]; old != nil && old.addr == lc.Listen {
			p.old = old
		} else {
			// tcpproxy.Listen leaves keep-alive off on accepted sockets:
			// the idle timeout guards them, without 4 setsockopt calls
			// per connection.
			ln, err := tcpproxy.Listen(context.Background(), lc.Listen)
			if err != nil {
				undo()
				return nil, nil, fmt.Errorf("listener %q: %w", lc.Name, err)
			}
			p.ln = ln
			p.next, err = tcpproxy.NewListener(p.ln, p.cfg, s.tcpUpstream, s.metrics.tcp, s.log)
			if err != nil {
				plans = append(plans, p)
				undo()
				return nil, nil, fmt.Errorf("listener %q: %w", lc.Name, err)
			}
		}
		plans = append(plans, p)
	}
	return plans, undo, nil
}

// commitTCP starts the new tcp listeners, updates the kept ones and drains
// the removed ones (in the background, up to the shutdown timeout).
func (s *Server) commitTCP(plans []*tcpPlan) {
	next := make(map[string]*tcpListener, len(plans))
	for _, p := range plans {
		if p.old != nil {
			if err := p.old.l.Update(p.cfg); err != nil { // validated in prepare
				s.log.Error("tcp listener: update failed; it keeps its settings", "listener", p.cfg.Name, "err", err)
			}
			next[p.cfg.Name] = p.old
			continue
		}
		t := &tcpListener{name: p.cfg.Name, addr: p.addr, l: p.next, done: make(chan struct{})}
		go func() {
			defer close(t.done)
			if err := t.l.Serve(); err != nil {
				s.log.Error("tcp listener stopped", "listener", t.name, "err", err)
			}
		}()
		next[t.name] = t
	}
	for name, t := range s.tcp {
		if next[name] != t {
			s.log.Info("tcp listener removed, draining", "listener", name, "listen", t.addr)
			s.draining.Add(1)
			timeout := s.shutdownTimeout
			go func() {
				defer s.draining.Done()
				t.shutdown(timeout)
			}()
		}
	}
	s.tcp = next
}

// shutdown stops accepting and lets connections finish up to timeout.
func (t *tcpListener) shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	t.l.Shutdown(ctx)
	<-t.done
}

// TCPStats returns the tcp listeners' statistics, for the admin API.
func (s *Server) TCPStats() []tcpproxy.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]tcpproxy.Stats, 0, len(s.tcp))
	for _, t := range s.tcp {
		out = append(out, t.l.Stats())
	}
	return out
}
