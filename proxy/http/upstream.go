package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/registry"
)

// Upstream is the running form of one configured upstream: its pool of
// endpoints, the balancer over it and the client that talks to them.
type Upstream struct {
	name string
	cfg  config.Upstream
	pool *endpoint.Pool
	bal  balance.Balancer
	// unsub stops feeding the balancer when the upstream is replaced.
	unsub func()
	// stopRun stops the balancer's background work (dynamic_weight).
	stopRun context.CancelFunc
	// hashKey says where a hashing policy finds a request's key; nil when
	// the policy needs none.
	hashKey *balance.HashKey
	// loadHeader is the response header carrying endpoints' load reports.
	loadHeader string
	// bulkhead caps requests in flight to the upstream; nil for none.
	bulkhead *bulkhead
	// health runs active checks and passive ejection; nil for none.
	health *healthState
	log    *slog.Logger

	h1 *h1Client       // protocol http1
	h2 *http.Transport // protocol h2c

	// feed streams the endpoints of an upstream with discovery; nil for
	// one with targets. feedKey names its settings, unfeed stops this
	// generation's subscription to it.
	feed    Feed
	feedKey string
	unfeed  func()
	// epMu orders membership changes (reloads, feeds); shared by every
	// generation of the upstream, like the pool.
	epMu *sync.Mutex
}

// Name is the upstream's configured name.
func (u *Upstream) Name() string { return u.name }

// Pool is the upstream's endpoint pool.
func (u *Upstream) Pool() *endpoint.Pool { return u.pool }

// Policy is the balancing policy's name.
func (u *Upstream) Policy() string { return u.cfg.Balance.Policy }

// Protocol is the protocol spoken to the endpoints.
func (u *Upstream) Protocol() string { return u.cfg.Protocol }

// ConnStats returns the open and idle upstream connections per endpoint
// address (HTTP/1.1 upstreams only).
func (u *Upstream) ConnStats() map[string][2]int64 {
	if u.h1 == nil {
		return nil
	}
	return u.h1.stats()
}

func specs(c *config.Upstream) []endpoint.Spec {
	out := make([]endpoint.Spec, 0, len(c.Targets))
	for _, t := range c.Targets {
		out = append(out, endpoint.Spec{Address: t.Address, Weight: t.Weight, Zone: t.Zone})
	}
	return out
}

// buildUpstream makes the running form of c. When prev (the same upstream
// from the running config) exists, its pool is kept, so endpoints keep their
// live state across a reload, and so are its balancer and client when their
// settings did not change.
func buildUpstream(name string, c *config.Upstream, prev *Upstream, log *slog.Logger, m *Metrics, disc Discovery) (_ *Upstream, err error) {
	u := &Upstream{name: name, cfg: *c, log: log, feedKey: discoveryKey(c.Discovery)}
	defer func() {
		if err != nil {
			u.closeNewFeed(prev) // a failed build keeps no feed it opened
		}
	}()
	if prev != nil {
		u.pool, u.epMu = prev.pool, prev.epMu
	} else {
		u.pool, u.epMu = endpoint.NewPool(name), &sync.Mutex{}
	}
	if c.Discovery != nil {
		if prev != nil && prev.feed != nil && prev.feedKey == u.feedKey {
			u.feed = prev.feed
		} else {
			if disc == nil {
				return nil, errors.New("discovery: no registries are running in this process")
			}
			f, err := disc.Watch(c.Discovery.Registry, discoveryQuery(c.Discovery))
			if err != nil {
				return nil, fmt.Errorf("discovery: %w", err)
			}
			u.feed = f
		}
	}
	bc := c.Balance
	sameBalance := prev != nil && reflect.DeepEqual(prev.cfg.Balance, c.Balance)
	if sameBalance {
		u.bal = prev.bal
	} else {
		b, err := balance.New(bc)
		if err != nil {
			return nil, err
		}
		u.bal = b
	}
	if bc.HashKey != "" {
		k, err := balance.ParseHashKey(bc.HashKey)
		if err != nil {
			return nil, err
		}
		u.hashKey = &k
	}
	if prev != nil && reflect.DeepEqual(prev.cfg.Health, c.Health) && reflect.DeepEqual(prev.cfg.Breaker, c.Breaker) && (prev.cfg.Discovery != nil) == (c.Discovery != nil) {
		u.health = prev.health
	} else {
		h, err := newHealthState(name, u.pool, c.Health, c.Breaker, c.Discovery != nil, log, m.states)
		if err != nil {
			return nil, fmt.Errorf("health: %w", err)
		}
		u.health = h
	}
	if c.Concurrency != nil {
		if prev != nil && prev.bulkhead != nil && prev.bulkhead.cfg == *c.Concurrency {
			u.bulkhead = prev.bulkhead
		} else {
			lim, err := ratelimit.NewConcurrency(*c.Concurrency)
			if err != nil {
				return nil, err
			}
			u.bulkhead = &bulkhead{cfg: *c.Concurrency, c: lim}
		}
	}
	u.loadHeader = http.CanonicalHeaderKey(bc.DynamicWeight.Header)
	if u.loadHeader == "" {
		u.loadHeader = HeaderLoad
	}
	sameClient := prev != nil && prev.cfg.Protocol == c.Protocol && prev.cfg.Timeouts == c.Timeouts &&
		prev.cfg.IdleTimeout == c.IdleTimeout && reflect.DeepEqual(prev.cfg.MaxIdlePerEndpoint, c.MaxIdlePerEndpoint)
	if sameClient {
		u.h1, u.h2 = prev.h1, prev.h2
	} else {
		maxIdle := 64
		if c.MaxIdlePerEndpoint != nil {
			maxIdle = *c.MaxIdlePerEndpoint
		}
		switch c.Protocol {
		case "h2c":
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			d := &net.Dialer{Timeout: c.Timeouts.Connect.Std(), KeepAlive: 30 * time.Second}
			u.h2 = &http.Transport{
				Protocols:             &p,
				DialContext:           d.DialContext,
				ResponseHeaderTimeout: c.Timeouts.ResponseHeader.Std(),
				IdleConnTimeout:       c.IdleTimeout.Std(),
				MaxIdleConnsPerHost:   maxIdle,
				DisableCompression:    true,
			}
		default:
			u.h1 = newH1Client(c.Timeouts.Connect.Std(), c.Timeouts.ResponseHeader.Std(), c.IdleTimeout.Std(), maxIdle)
		}
	}
	return u, nil
}

// activate starts feeding the balancer from the pool and applies the
// configured targets. It runs once the whole new config has been built.
func (u *Upstream) activate(prev *Upstream) {
	samePanic := prev != nil && prev.cfg.Health.PanicThreshold == u.cfg.Health.PanicThreshold
	if prev != nil && prev.bal == u.bal && samePanic {
		u.unsub, u.stopRun = prev.unsub, prev.stopRun
	} else {
		if prev != nil {
			if prev.bal == u.bal {
				// Only the panic threshold changed: keep the background
				// work, feed the balancer anew.
				prev.unsub()
				u.stopRun = prev.stopRun
			} else {
				prev.stopBalancer()
			}
		}
		feed := &panicFeed{upstream: u.name, threshold: u.cfg.Health.PanicThreshold, update: u.bal.Update, log: u.log}
		u.unsub = u.pool.Subscribe(feed.feed)
		if r, ok := u.bal.(balance.Runner); ok && u.stopRun == nil {
			ctx, cancel := context.WithCancel(context.Background())
			u.stopRun = cancel
			go r.Run(ctx)
		}
	}
	if prev != nil && prev.unfeed != nil {
		prev.unfeed() // this generation follows the feed from here on
	}
	if prev != nil && prev.feed != nil && prev.feed != u.feed {
		prev.feed.Close()
	}
	if prev != nil && prev.health != nil && prev.health != u.health {
		prev.health.close(u.pool.Snapshot().All, "health checking reconfigured")
	}
	if u.health != nil && (prev == nil || prev.health != u.health) {
		defer u.health.start()
	}
	if u.feed != nil {
		if !u.feed.Answered() {
			// No answer yet (a registry down with no disk cache): keep
			// the endpoints the upstream had, under this generation's
			// health checks, until the registry answers.
			u.setEndpoints(poolSpecs(u.pool), nil)
		}
		// Subscribe delivers the latest answer at once and every later one.
		u.unfeed = u.feed.Subscribe(func(in []registry.Instance) {
			u.setEndpoints(discovery.Specs(in), registryHealth(in))
		})
	} else {
		u.setEndpoints(specs(&u.cfg), nil)
	}
	if prev != nil {
		if prev.h1 != nil && prev.h1 != u.h1 {
			prev.h1.close()
		}
		if prev.h2 != nil && prev.h2 != u.h2 {
			prev.h2.CloseIdleConnections()
		}
	}
}

// closeNewFeed closes a feed this build opened (not one taken over from
// prev) when the build fails.
func (u *Upstream) closeNewFeed(prev *Upstream) {
	if u.feed != nil && (prev == nil || prev.feed != u.feed) {
		u.feed.Close()
	}
}

// stopBalancer stops feeding the balancer and its background work.
func (u *Upstream) stopBalancer() {
	if u.unsub != nil {
		u.unsub()
	}
	if u.stopRun != nil {
		u.stopRun()
	}
}

// retire stops an upstream that the new config no longer has.
func (u *Upstream) retire() {
	u.stopBalancer()
	if u.unfeed != nil {
		u.unfeed()
	}
	if u.feed != nil {
		u.feed.Close()
	}
	if u.health != nil {
		u.health.close(u.pool.Snapshot().All, "upstream removed")
	}
	if u.h1 != nil {
		u.h1.close()
	}
	if u.h2 != nil {
		u.h2.CloseIdleConnections()
	}
}

// roundTrip sends out to ep and returns the response. The caller closes the
// response body, which releases the connection.
func (u *Upstream) roundTrip(ctx context.Context, deadline time.Time, ep *endpoint.Endpoint, out *outRequest) (*http.Response, error) {
	if u.h1 != nil {
		return u.h1.do(ctx, deadline, ep.Address(), out)
	}
	cancel := context.CancelFunc(func() {})
	if !deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	body := out.body
	req, err := http.NewRequestWithContext(ctx, out.req.Method, "http://"+ep.Address()+out.uri, body)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Host = out.host
	req.Header = out.header
	req.ContentLength = out.length
	if body == nil {
		req.ContentLength = 0
	}
	resp, err := u.h2.RoundTrip(req)
	if err != nil {
		cancel()
		if ctx.Err() == context.DeadlineExceeded {
			return nil, errRequestTimeout
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, &connectError{err}
		}
		return nil, err
	}
	resp.Body = &cancelBody{resp.Body, cancel}
	return resp, nil
}

// cancelBody releases the request's context once the body is done with.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// requestKey extracts the request's hash key for a hashing policy.
func (u *Upstream) requestKey(r *http.Request) (string, bool) {
	k := u.hashKey
	switch k.Source {
	case balance.HashKeyHeader:
		if v := r.Header[k.Name]; len(v) > 0 {
			return v[0], true
		}
	case balance.HashKeyCookie:
		if c, err := r.Cookie(k.Name); err == nil {
			return c.Value, true
		}
	case balance.HashKeyClientIP:
		// The direct peer: X-Forwarded-For is the client's to write.
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			return host, true
		}
	case balance.HashKeyPath:
		return r.URL.Path, true
	case balance.HashKeyQuery:
		if vs, ok := r.URL.Query()[k.Name]; ok && len(vs) > 0 {
			return vs[0], true
		}
	}
	return "", false
}
