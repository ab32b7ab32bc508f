package tcpproxy

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Defaults of Config, used where a field is left zero.
const (
	DefaultSNITimeout           = 5 * time.Second
	DefaultConnectTimeout       = 5 * time.Second
	DefaultConnectAttempts      = 3
	DefaultIdleTimeout          = 10 * time.Minute
	DefaultQueueTimeout         = 5 * time.Second
	DefaultProxyProtocolTimeout = 5 * time.Second
)

// NoIdleTimeout, as Config.IdleTimeout, turns the idle timeout off: a
// connection with no bytes either way then stays open until a peer closes it
// (TCP keep-alive, on by default, still finds dead peers).
const NoIdleTimeout time.Duration = -1

// Bounds a Config is checked against. They keep a typo from turning into
// a resource problem; nobody needs more.
const (
	maxConnectAttempts = 16
	maxSNINameLen      = 253 // a DNS name in text form
)

// SNIRoute sends TLS connections whose ClientHello names one of Names to
// Upstream.
type SNIRoute struct {
	// Names are host names, matched case-insensitively against the
	// ClientHello's server_name: exact ("api.example.com") or a wildcard
	// for exactly one leftmost label ("*.example.com" matches
	// "a.example.com", not "example.com" nor "a.b.example.com"), as TLS
	// certificates match. An exact name wins over a wildcard.
	Names []string
	// Upstream is the name of the upstream to forward to.
	Upstream string
}

// Config is one TCP listener's settings. The zero value of every field means
// its default; Validate rejects values that cannot work.
type Config struct {
	// Name is the listener's name in metrics, logs and Stats. Required.
	Name string
	// Upstream is the upstream every connection goes to; with SNI routes,
	// the one for connections whose name no route matches (or that send
	// no name). It may be empty when SNI routes are set: such connections
	// are then closed.
	Upstream string
	// SNI routes TLS connections by the server name of their ClientHello,
	// without terminating TLS (passthrough). Non-empty turns the listener
	// into a TLS-only listener: a connection whose first bytes are not a
	// TLS ClientHello is closed.
	SNI []SNIRoute
	// SNITimeout bounds the wait for a complete ClientHello. Default 5s.
	SNITimeout time.Duration
	// ConnectTimeout bounds one connection attempt to an endpoint.
	// Default 5s.
	ConnectTimeout time.Duration
	// ConnectAttempts is how many endpoints a connection tries before it
	// gives up: the first and the retries, each on the next endpoint the
	// balancer picks. Default 3; at most 16.
	ConnectAttempts int
	// IdleTimeout closes both sides of a connection that has received no
	// byte from either peer for this long. Default 10m; NoIdleTimeout (any
	// negative value) turns it off. It is checked every quarter of the
	// timeout (at most every 10s), so a connection is closed between
	// IdleTimeout and 1.25×IdleTimeout of silence. Connections to
	// endpoints use TCP keep-alive only when it is off.
	IdleTimeout time.Duration
	// MaxConns caps the connections the listener serves at once (those in
	// the queue not counted). 0 means no limit.
	MaxConns int
	// MaxConnsPerEndpoint caps the connections the listener has open to
	// any one endpoint; a full endpoint is skipped for the next pick.
	// 0 means no limit.
	MaxConnsPerEndpoint int
	// QueueSize lets that many connections wait, accepted, for a free slot
	// when the listener is at MaxConns. 0 (the default) closes a
	// connection over the limit at once. Needs MaxConns.
	QueueSize int
	// QueueTimeout bounds a connection's wait in the queue; it is closed
	// when the time is up. Default 5s.
	QueueTimeout time.Duration
	// SendProxyProtocol sends a PROXY protocol header ("v1": text, "v2":
	// binary) to the endpoint before any byte of the client, carrying the
	// client's address. "" sends none.
	SendProxyProtocol string
	// AcceptProxyProtocol reads a PROXY protocol header (v1 or v2) from
	// connections whose source is in TrustedProxies, and takes the client
	// address from it. Such a connection must send a valid header within
	// ProxyProtocolTimeout or it is closed. Connections from any other
	// source are not parsed: their bytes, a PROXY header included, are
	// forwarded as they are.
	AcceptProxyProtocol bool
	// TrustedProxies are the source networks allowed (and required) to
	// send a PROXY protocol header. Required with AcceptProxyProtocol;
	// must be empty without it.
	TrustedProxies []netip.Prefix
	// ProxyProtocolTimeout bounds the wait for the PROXY header.
	// Default 5s.
	ProxyProtocolTimeout time.Duration
	// Engine runs the listener's connections: EngineEventLoop (Linux:
	// event loops accept, connect and splice every connection, no
	// goroutine per connection), EngineGoroutine (a goroutine per
	// connection, on every system), or EngineAuto ("" too): the event
	// loop on Linux for a listener whose features it has (every one but
	// SNI routing and AcceptProxyProtocol), else the goroutine engine.
	// It is fixed for a Listener's life (Update refuses to change it;
	// Server moves a listener whose engine changes to a new Listener on
	// the same socket).
	Engine string
}

// The engines of a listener (Config.Engine).
const (
	EngineAuto      = "auto"
	EngineGoroutine = "goroutine"
	EngineEventLoop = "eventloop"
)

// LoopFeatureMissing names the feature of c that the event-loop engine
// does not have ("sni", "accept_proxy_protocol"), or "" when the loop can
// serve c.
func (c Config) LoopFeatureMissing() string {
	switch {
	case len(c.SNI) > 0:
		return "sni"
	case c.AcceptProxyProtocol:
		return "accept_proxy_protocol"
	}
	return ""
}

// EngineName is the engine that serves c: EngineEventLoop or
// EngineGoroutine (see Engine).
func (c Config) EngineName() string {
	switch c.Engine {
	case EngineEventLoop:
		return EngineEventLoop
	case "", EngineAuto:
		if loopAvailable && autoLoop && c.LoopFeatureMissing() == "" {
			return EngineEventLoop
		}
	}
	return EngineGoroutine
}

// Validate reports every field that cannot work, each error naming the
// field as the configuration file does ("sni[0].names[1]: ...").
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Name == "" {
		bad("name", "required")
	}
	if c.Upstream == "" && len(c.SNI) == 0 {
		bad("upstream", "required (or sni routes)")
	}
	seen := map[string]string{}
	for i, r := range c.SNI {
		if r.Upstream == "" {
			bad(fmt.Sprintf("sni[%d].upstream", i), "required")
		}
		if len(r.Names) == 0 {
			bad(fmt.Sprintf("sni[%d].names", i), "at least one name required")
		}
		for j, n := range r.Names {
			field := fmt.Sprintf("sni[%d].names[%d]", i, j)
			norm, err := normalizeRouteName(n)
			if err != nil {
				bad(field, "%q: %v", n, err)
				continue
			}
			if prev, dup := seen[norm]; dup {
				bad(field, "%q is already routed by %s", n, prev)
				continue
			}
			seen[norm] = field
		}
	}
	durs := []struct {
		name string
		d    time.Duration
	}{
		{"sni_timeout", c.SNITimeout},
		{"connect_timeout", c.ConnectTimeout},
		{"queue_timeout", c.QueueTimeout},
		{"proxy_protocol_timeout", c.ProxyProtocolTimeout},
	}
	for _, d := range durs {
		if d.d < 0 {
			bad(d.name, "%v: must be positive (0 for the default)", d.d)
		}
	}
	if c.IdleTimeout > 0 && c.IdleTimeout < time.Millisecond {
		bad("idle_timeout", "%v: must be at least 1ms (or negative: off)", c.IdleTimeout)
	}
	if c.ConnectAttempts < 0 || c.ConnectAttempts > maxConnectAttempts {
		bad("connect_attempts", "%d: must be 1 to %d (0 for the default %d)", c.ConnectAttempts, maxConnectAttempts, DefaultConnectAttempts)
	}
	if c.MaxConns < 0 {
		bad("max_conns", "%d: must be 0 (no limit) or more", c.MaxConns)
	}
	if c.MaxConnsPerEndpoint < 0 {
		bad("max_conns_per_endpoint", "%d: must be 0 (no limit) or more", c.MaxConnsPerEndpoint)
	}
	if c.QueueSize < 0 {
		bad("queue_size", "%d: must be 0 (no queue) or more", c.QueueSize)
	} else if c.QueueSize > 0 && c.MaxConns == 0 {
		bad("queue_size", "%d: a queue needs max_conns (connections wait for a free slot under it)", c.QueueSize)
	}
	switch c.SendProxyProtocol {
	case "", "v1", "v2":
	default:
		bad("send_proxy_protocol", "%q: must be v1, v2 or empty", c.SendProxyProtocol)
	}
	if c.AcceptProxyProtocol && len(c.TrustedProxies) == 0 {
		bad("trusted_proxies", "required with accept_proxy_protocol: only trusted sources may send a PROXY header")
	}
	if !c.AcceptProxyProtocol && len(c.TrustedProxies) > 0 {
		bad("trusted_proxies", "set, but accept_proxy_protocol is false")
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			bad(fmt.Sprintf("trusted_proxies[%d]", i), "not a valid CIDR prefix")
		}
	}
	switch c.Engine {
	case "", EngineAuto, EngineGoroutine:
	case EngineEventLoop:
		if !loopAvailable {
			bad("engine", "eventloop needs Linux (epoll)")
		} else if f := c.LoopFeatureMissing(); f != "" {
			bad("engine", "eventloop does not do %s; a listener with it runs on the goroutine engine (auto or goroutine)", f)
		}
	default:
		bad("engine", "unknown engine %q (known: auto, goroutine, eventloop)", c.Engine)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.SNITimeout = cmp.Or(c.SNITimeout, DefaultSNITimeout)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	c.ConnectAttempts = cmp.Or(c.ConnectAttempts, DefaultConnectAttempts)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.QueueTimeout = cmp.Or(c.QueueTimeout, DefaultQueueTimeout)
	c.ProxyProtocolTimeout = cmp.Or(c.ProxyProtocolTimeout, DefaultProxyProtocolTimeout)
	return c
}

// settings is a validated Config compiled for the connection path. A
// connection takes the settings current when it was accepted and keeps
// them to its end, so that Update never changes an established connection.
type settings struct {
	cfg Config // with defaults
	// exact maps a lower-case server name to its upstream; wild maps the
	// part after a wildcard's "*." to its upstream.
	exact, wild map[string]string
	sni         bool
	// loop: the event-loop engine serves the listener (Config.EngineName).
	loop bool
	// checkEvery is how often a connection's activity is looked at: for
	// the idle timeout and for byte counters of long connections.
	checkEvery time.Duration
}

// Activity checks run at most this far apart, so that byte counters of
// long connections move at least this often.
const maxCheckEvery = 10 * time.Second

func compile(c Config) (*settings, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	s := &settings{cfg: c, sni: len(c.SNI) > 0, checkEvery: maxCheckEvery, loop: c.EngineName() == EngineEventLoop}
	if c.IdleTimeout > 0 {
		s.checkEvery = min(c.IdleTimeout/4, maxCheckEvery)
	}
	if s.sni {
		s.exact, s.wild = map[string]string{}, map[string]string{}
		for _, r := range c.SNI {
			for _, n := range r.Names {
				n, _ = normalizeRouteName(n)
				if rest, ok := strings.CutPrefix(n, "*."); ok {
					s.wild[rest] = r.Upstream
				} else {
					s.exact[n] = r.Upstream
				}
			}
		}
	}
	return s, nil
}

// route returns the upstream for a ClientHello's server name (already
// lower-case, "" when the client sent none), or "" for none.
func (s *settings) route(name string) string {
	if name != "" {
		if u, ok := s.exact[name]; ok {
			return u
		}
		if _, rest, ok := strings.Cut(name, "."); ok && rest != "" {
			if u, ok := s.wild[rest]; ok {
				return u
			}
		}
	}
	return s.cfg.Upstream
}

// normalizeRouteName lower-cases a route name and checks that it is a host
// name, optionally with "*." for one leftmost label.
func normalizeRouteName(n string) (string, error) {
	n = strings.ToLower(n)
	host := n
	if rest, ok := strings.CutPrefix(n, "*."); ok {
		host = rest
		if !strings.Contains(host, ".") {
			return "", errors.New("a wildcard needs at least two labels after \"*.\" (\"*.example.com\")")
		}
	}
	if host == "" {
		return "", errors.New("empty name")
	}
	if len(host) > maxSNINameLen {
		return "", fmt.Errorf("longer than %d characters", maxSNINameLen)
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" {
			return "", errors.New("empty label (leading, trailing or double dot)")
		}
		if len(label) > 63 {
			return "", errors.New("a label is longer than 63 characters")
		}
		for i := 0; i < len(label); i++ {
			b := label[i]
			switch {
			case b >= 'a' && b <= 'z', b >= '0' && b <= '9', b == '-', b == '_':
			case b == '*':
				return "", errors.New("\"*\" is allowed only as the whole leftmost label (\"*.example.com\")")
			default:
				return "", fmt.Errorf("character %q is not allowed in a host name", b)
			}
		}
	}
	return n, nil
}

// autoLoop: EngineAuto chooses the event loop where it can serve the
// listener.
const autoLoop = true
