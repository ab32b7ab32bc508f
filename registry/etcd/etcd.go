package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/switchboard-dev/switchboard/registry"
)

// Defaults for Config and Registration fields left zero.
const (
	DefaultPrefix         = "/switchboard"
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	// DefaultTTL is the lease TTL of a registration whose Check.TTL is 0.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest lease a registration may ask for: etcd leases
	// count whole seconds. etcd itself raises short leases to its own
	// minimum, 1.5 election timeouts rounded up (2s with the default 1s
	// election timeout; etcd issue #14857); the granted TTL is what the
	// Registry then works with.
	MinTTL = time.Second
)

// Limits on what etcd may send us.
const (
	// maxResponseBytes caps one gRPC response (a prefix Get of a huge
	// service): about 200k instances.
	maxResponseBytes = 64 << 20
	// maxValueBytes caps one instance's JSON; bigger values are skipped.
	maxValueBytes = 64 << 10
)

// Re-registration backoff: the first attempt after a lease loss is
// immediate, then retryBase doubling to retryMax, each wait randomized to
// [d/2, d) so that a fleet does not stampede a recovering etcd.
const (
	retryBase = 250 * time.Millisecond
	retryMax  = 15 * time.Second
	// maxReconnectDelay caps gRPC's reconnect backoff.
	maxReconnectDelay = 5 * time.Second
)

// Config configures a Registry. Only Endpoints is required.
type Config struct {
	// Endpoints are etcd client URLs or host:port pairs. Required.
	Endpoints []string
	// Prefix is prepended to every key. Default "/switchboard"; a trailing
	// "/" is dropped, so "/" means no prefix: keys /services/<service>/<id>,
	// where Python fleets write theirs (see the package doc).
	Prefix string
	// Username and Password authenticate to etcd when Username is set.
	Username string
	Password string
	// TLS, when set, is used for the client connections (https endpoints).
	TLS *tls.Config
	// DialTimeout bounds authentication and the first keepalive's wait for
	// an answer. The connection itself is established in the background:
	// New does not fail because etcd is down. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each etcd request (grant, put, get, revoke).
	// Default 5s.
	RequestTimeout time.Duration
	// Logger receives one line per registry event worth an operator's
	// attention (lease lost, re-registered, watch re-listed, bad values).
	// Default slog.Default().
	Logger *slog.Logger
}

// Registry is an etcd-backed registry.Registrar, registry.Heartbeater and
// registry.Discoverer. Its methods are safe for concurrent use.
type Registry struct {
	cli        *clientv3.Client
	prefix     string
	reqTimeout time.Duration
	log        *slog.Logger

	// ctx ends at Close; every goroutine of the Registry watches it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	opMu   sync.Mutex // serializes Register and Deregister
	mu     sync.Mutex // guards regs, closed, reconnected
	regs   map[string]*keeper
	closed bool
	// reconnected is closed, and replaced, each time the client
	// connection becomes ready again after it was lost.
	reconnected chan struct{}
	// disconnected is closed, and replaced, each time a ready connection
	// is lost: watchers report the outage instead of blocking silently.
	disconnected chan struct{}
}

var (
	_ registry.Registrar   = (*Registry)(nil)
	_ registry.Heartbeater = (*Registry)(nil)
	_ registry.Discoverer  = (*Registry)(nil)
)

// errClosed is returned by every method after Close.
var errClosed = errors.New("etcd: registry is closed")

// New validates cfg and creates the etcd client. It does not wait for
// etcd: requests made while etcd is unreachable fail after RequestTimeout.
func New(cfg Config) (*Registry, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: endpoints: at least one endpoint is required")
	}
	for i, ep := range cfg.Endpoints {
		if strings.TrimSpace(ep) == "" {
			return nil, fmt.Errorf("etcd: endpoints[%d]: must not be empty", i)
		}
	}
	if cfg.DialTimeout < 0 {
		return nil, fmt.Errorf("etcd: dial_timeout: %v must not be negative", cfg.DialTimeout)
	}
	if cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("etcd: request_timeout: %v must not be negative", cfg.RequestTimeout)
	}
	if cfg.Password != "" && cfg.Username == "" {
		return nil, errors.New("etcd: username: required when password is set")
	}
	prefix := strings.TrimRight(cfg.Prefix, "/")
	if cfg.Prefix == "" {
		prefix = DefaultPrefix
	}
	dial := cfg.DialTimeout
	if dial == 0 {
		dial = DefaultDialTimeout
	}
	req := cfg.RequestTimeout
	if req == 0 {
		req = DefaultRequestTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: dial,
		// gRPC keepalive pings find a dead peer (a partition without a
		// TCP reset) in 15s; etcd refuses pings more often than every 5s
		// (--grpc-keepalive-min-time).
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		MaxCallRecvMsgSize:   maxResponseBytes,
		// gRPC's default reconnect backoff grows to 120s: after a long
		// etcd outage, registrations and watches would come back up to
		// two minutes late. Cap it at 5s.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  250 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   maxReconnectDelay,
			},
			MinConnectTimeout: dial,
		})},
		TLS:      cfg.TLS,
		Username: cfg.Username,
		Password: cfg.Password,
		// The client's own zap logging would duplicate ours, in another
		// format; we log what matters through slog.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: creating client for %v: %w", cfg.Endpoints, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		cli:          cli,
		prefix:       prefix,
		reqTimeout:   req,
		log:          log.With("registry", "etcd"),
		ctx:          ctx,
		cancel:       cancel,
		regs:         make(map[string]*keeper),
		reconnected:  make(chan struct{}),
		disconnected: make(chan struct{}),
	}
	r.wg.Add(1)
	go r.watchConnection()
	return r, nil
}

// Close stops keeping leases alive, ends all watches and closes the etcd
// client. It does not deregister: like a process that dies, the instances
// disappear when their leases expire (call Deregister first to remove them
// at once). Close is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	keepers := make([]*keeper, 0, len(r.regs))
	for _, k := range r.regs {
		keepers = append(keepers, k)
	}
	r.regs = map[string]*keeper{}
	r.mu.Unlock()

	r.cancel()
	for _, k := range keepers {
		<-k.done
	}
	r.wg.Wait()
	return r.cli.Close()
}

// Client is the underlying etcd client, for what this package does not
// cover. It is closed by Close.
func (r *Registry) Client() *clientv3.Client { return r.cli }

// serviceKey is the key prefix of one service's instances, with the
// trailing "/" so that "orders" does not match "orders-v2".
func (r *Registry) serviceKey(service string) string {
	return r.prefix + "/services/" + service + "/"
}

func (r *Registry) instanceKey(service, id string) string {
	return r.serviceKey(service) + id
}

// watchConnection turns gRPC connectivity changes into reconnect
// notifications for the watchers: when the connection was lost and is
// ready again, etcd may have come back with a different history (wiped or
// restored data), which the etcd client's transparent watch resume cannot
// see. Watchers then verify what they hold (see watcher.verify).
func (r *Registry) watchConnection() {
	defer r.wg.Done()
	conn := r.cli.ActiveConnection()
	lost := false
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			if lost {
				lost = false
				r.mu.Lock()
				close(r.reconnected)
				r.reconnected = make(chan struct{})
				r.mu.Unlock()
			}
		case connectivity.Shutdown:
			return
		}
		if !conn.WaitForStateChange(r.ctx, s) {
			return // Close
		}
		if s == connectivity.Ready {
			lost = true
			r.mu.Lock()
			close(r.disconnected)
			r.disconnected = make(chan struct{})
			r.mu.Unlock()
		}
	}
}

// disconnectedCh returns the channel that the next loss of the connection
// closes.
func (r *Registry) disconnectedCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.disconnected
}

// reconnectedCh returns the channel that the next reconnection closes.
func (r *Registry) reconnectedCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reconnected
}

// backoff is the wait before retry number n (n >= 1): retryBase doubling
// up to retryMax, randomized to [d/2, d).
func backoff(n int) time.Duration {
	d := retryMax
	if n < 16 {
		d = min(retryMax, retryBase<<(n-1))
	}
	return d/2 + rand.N(d/2)
}

// reqCtx bounds one etcd request by RequestTimeout and by the Registry's
// lifetime as well as by the caller's ctx.
func (r *Registry) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, r.reqTimeout)
	stop := context.AfterFunc(r.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}
