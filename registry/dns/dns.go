// Package dns is a registry.Discoverer over DNS: SRV records (a name like
// _http._tcp.orders.service.consul gives each instance's host, port and
// weight) or A/AAAA records (a host name and a fixed port).
//
// It queries the servers itself with github.com/miekg/dns rather than
// through net.Resolver, because the records' TTLs decide when to ask again
// and net.Resolver does not expose them. A watch re-resolves when the
// shortest TTL of the records it used expires, clamped to [MinTTL, MaxTTL],
// and yields a snapshot only when the set of instances changed. A failed
// resolution is returned by Next as an error every time it happens; the
// discovery cache keeps serving the last good set meanwhile. The first
// successful Next after any error returns the instances even when they did
// not change, so that the caller learns the name resolves again.
//
// An authoritative "no such name" (NXDOMAIN) or an empty answer is a valid,
// empty set of instances, not an error: it is what Consul answers when a
// service has no healthy instance.
package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchboard-dev/switchboard/internal/clock"
	"github.com/switchboard-dev/switchboard/registry"
)

// Record types for Config.Type.
const (
	TypeSRV = "srv"
	TypeA   = "a"
)

// Defaults for Config fields left zero.
const (
	DefaultMinTTL  = time.Second
	DefaultMaxTTL  = 5 * time.Minute
	DefaultTimeout = 2 * time.Second
	// ResolvConf is where the default servers come from.
	ResolvConf = "/etc/resolv.conf"
)

// udpSize is the EDNS0 buffer we advertise: answers up to 4 KiB come over
// UDP; bigger ones set the truncation bit and we ask again over TCP (where
// a DNS message is at most 64 KiB).
const udpSize = 4096

// Config configures a DNS Discoverer.
type Config struct {
	// Name is the DNS name to resolve: an SRV name such as
	// _http._tcp.orders.service.consul, or a host name for Type "a". It is
	// used as given (fully qualified): no search domains. When empty, each
	// query's Service is the name to resolve, so that one Registry serves
	// many names (as a configured registry that upstreams name services
	// of does).
	Name string
	// Type is "srv" (default) or "a" (A and AAAA records, with Port).
	Type string
	// Port is every instance's port for Type "a". Required for "a",
	// ignored for "srv".
	Port int
	// Servers are the DNS servers, as host or host:port (port 53 when
	// omitted), tried in order. Default: the nameservers in
	// /etc/resolv.conf.
	Servers []string
	// MinTTL is the floor of the re-resolution interval (records with a
	// TTL of 0, as Consul serves by default, are asked for again after
	// MinTTL), and the wait after a failed resolution. Default 1s.
	MinTTL time.Duration
	// MaxTTL is the ceiling of the re-resolution interval. Default 5m.
	MaxTTL time.Duration
	// Timeout bounds one query to one server. Default 2s.
	Timeout time.Duration
}

// Registry resolves one DNS name into instances. It is safe for concurrent
// use and holds no resources: there is nothing to close.
type Registry struct {
	name    string // fully qualified
	typ     string
	port    int
	servers []string
	minTTL  time.Duration
	maxTTL  time.Duration
	timeout time.Duration
}

var _ registry.Discoverer = (*Registry)(nil)

// New validates cfg and, without Servers, reads /etc/resolv.conf.
func New(cfg Config) (*Registry, error) {
	r := &Registry{
		typ:     strings.ToLower(cfg.Type),
		port:    cfg.Port,
		minTTL:  cfg.MinTTL,
		maxTTL:  cfg.MaxTTL,
		timeout: cfg.Timeout,
	}
	if cfg.Name != "" {
		if _, ok := mdns.IsDomainName(cfg.Name); !ok {
			return nil, fmt.Errorf("dns: name: %q is not a domain name", cfg.Name)
		}
		r.name = mdns.Fqdn(cfg.Name)
	}
	switch r.typ {
	case "":
		r.typ = TypeSRV
	case TypeSRV:
	case TypeA:
		if cfg.Port < 1 || cfg.Port > 65535 {
			return nil, fmt.Errorf("dns: port: %d is out of range 1-65535 (type \"a\" needs the instances' port)", cfg.Port)
		}
	default:
		return nil, fmt.Errorf("dns: type: %q is not \"srv\" or \"a\"", cfg.Type)
	}
	if r.minTTL == 0 {
		r.minTTL = DefaultMinTTL
	}
	if r.maxTTL == 0 {
		r.maxTTL = DefaultMaxTTL
	}
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	switch {
	case r.minTTL < 0:
		return nil, fmt.Errorf("dns: min_ttl: %v must not be negative", cfg.MinTTL)
	case r.maxTTL < r.minTTL:
		return nil, fmt.Errorf("dns: max_ttl: %v is below min_ttl %v", r.maxTTL, r.minTTL)
	case r.timeout < 0:
		return nil, fmt.Errorf("dns: timeout: %v must not be negative", cfg.Timeout)
	}
	servers := cfg.Servers
	if len(servers) == 0 {
		cc, err := mdns.ClientConfigFromFile(ResolvConf)
		if err != nil {
			return nil, fmt.Errorf("dns: servers: none given and %s is unreadable: %w", ResolvConf, err)
		}
		for _, s := range cc.Servers {
			servers = append(servers, net.JoinHostPort(s, cc.Port))
		}
		if len(servers) == 0 {
			return nil, fmt.Errorf("dns: servers: none given and %s lists none", ResolvConf)
		}
	}
	for i, s := range servers {
		addr, err := serverAddr(s)
		if err != nil {
			return nil, fmt.Errorf("dns: servers[%d]: %w", i, err)
		}
		r.servers = append(r.servers, addr)
	}
	return r, nil
}

func serverAddr(s string) (string, error) {
	if s == "" {
		return "", errors.New("must not be empty")
	}
	if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
		return net.JoinHostPort(ip.String(), "53"), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("%q is not host or host:port: %w", s, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q: port %q is out of range 1-65535", s, port)
	}
	return net.JoinHostPort(host, port), nil
}

// ClampTTL is the re-resolution interval for records whose shortest TTL is
// ttl: ttl raised to floor and lowered to ceiling.
func ClampTTL(ttl, floor, ceiling time.Duration) time.Duration {
	return min(max(ttl, floor), ceiling)
}

// target is the name a query resolves: Config.Name, or else q.Service.
func (r *Registry) target(q registry.Query) (string, error) {
	if len(q.Tags) > 0 {
		return "", fmt.Errorf("tags: %v: DNS records carry no tags", q.Tags)
	}
	if r.name != "" {
		return r.name, nil
	}
	if q.Service == "" {
		return "", errors.New("service: must be the DNS name to resolve (Config.Name is empty)")
	}
	if _, ok := mdns.IsDomainName(q.Service); !ok {
		return "", fmt.Errorf("service: %q is not a domain name", q.Service)
	}
	return mdns.Fqdn(q.Service), nil
}

// Instances resolves the name once. q.Service names the instances'
// service (and is the name to resolve when Config.Name is empty; default:
// the DNS name); q.Tags must be empty; q.PassingOnly is ignored (DNS
// serves what its server considers fit).
func (r *Registry) Instances(ctx context.Context, q registry.Query) ([]registry.Instance, error) {
	name, err := r.target(q)
	if err != nil {
		return nil, fmt.Errorf("dns: %w", err)
	}
	insts, _, err := r.resolve(ctx, name, q.Service)
	return insts, err
}

// Watch starts a watch; the first Next resolves at once. It lasts until
// Stop or the end of ctx.
func (r *Registry) Watch(ctx context.Context, q registry.Query) (registry.Watcher, error) {
	name, err := r.target(q)
	if err != nil {
		return nil, fmt.Errorf("dns: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	return &watcher{r: r, name: name, service: q.Service, ctx: wctx, cancel: cancel}, nil
}

type watcher struct {
	r       *Registry
	name    string // fully qualified
	service string
	ctx     context.Context
	cancel  context.CancelFunc

	mu   sync.Mutex // one Next at a time
	due  time.Time  // when to resolve next; zero: now
	last []registry.Instance
	// good: last is the answer of the latest resolution, which succeeded
	// (so until due it is the current set).
	good bool
	// emitted: the caller has last's snapshot and has had no error since;
	// only then may Next wait for a change.
	emitted bool
}

// Next resolves when the last answer's TTL has run out (at once the first
// time) and returns the instances if they differ from the last snapshot;
// otherwise it waits for the next expiry. A failed resolution returns an
// error, and the next attempt waits MinTTL.
//
// After any error (a failed resolution, or ctx ending while Next waited)
// the next successful Next returns at once, as registry.Watcher requires:
// with the last answer if its TTL still runs, else with the next
// resolution's, changed or not.
func (w *watcher) Next(ctx context.Context) (insts []registry.Instance, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() {
		if err != nil {
			w.emitted = false
		}
	}()
	if !w.emitted && w.good && time.Now().Before(w.due) {
		w.emitted = true
		return slices.Clone(w.last), nil
	}
	for {
		if err := w.ctx.Err(); err != nil {
			return nil, errors.New("dns: watch stopped")
		}
		if !w.due.IsZero() {
			wait, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(w.ctx, cancel)
			err := clock.Sleep(wait, time.Until(w.due))
			stop()
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				continue // stopped
			}
		}
		got, ttl, rerr := w.r.resolve(ctx, w.name, w.service)
		if rerr != nil {
			w.good = false
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			w.due = time.Now().Add(w.r.minTTL)
			return nil, rerr
		}
		w.due = time.Now().Add(ClampTTL(ttl, w.r.minTTL, w.r.maxTTL))
		w.good = true
		if !w.emitted || !slices.EqualFunc(got, w.last, sameInstance) {
			w.last, w.emitted = got, true
			return slices.Clone(got), nil
		}
	}
}

// Stop ends the watch; a blocked Next returns an error.
func (w *watcher) Stop() { w.cancel() }

func sameInstance(a, b registry.Instance) bool {
	return a.ID == b.ID && a.Address == b.Address && a.Port == b.Port && a.Weight == b.Weight &&
		a.Meta["target"] == b.Meta["target"] && a.Meta["priority"] == b.Meta["priority"]
}
