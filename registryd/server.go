package registryd

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// ErrClosed is returned by calls on a closed Server, and by watches that
// the server's Close ended. It wraps context.Canceled.
var ErrClosed = fmt.Errorf("registryd: server closed: %w", context.Canceled)

var errClosed = ErrClosed

// Server timeouts. WriteTimeout must outlast the longest blocking query:
// maxWait plus its jitter (maxWait/16).
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = maxWait + maxWait/16 + time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	shutdownTimeout   = time.Second
)

// Server is the embedded registry. Create it with New, serve HTTP with Start
// or Serve, and Close it when done: New already runs the checks of a loaded
// snapshot.
type Server struct {
	cfg         Config
	log         *slog.Logger
	clock       clock.Clock   // clock.Real; tests of TTLs and reaping pass a clock.Fake
	minInterval time.Duration // Consul's minimum check interval; tests lower it
	// noProbes keeps HTTP and TCP checks from running (the fuzz test must
	// not dial the addresses it invents).
	noProbes   bool
	datacenter string
	nodeID     string
	nodeAddr   string
	// listenHost is the host part of Config.Listen: without a token, the
	// only host name besides localhost that requests may be addressed to.
	listenHost string
	handler    http.Handler

	// ctx ends at Close: check runners, the persister and blocking queries
	// all stop on it. wg counts those goroutines.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu           sync.RWMutex
	closed       bool
	index        uint64 // the last index handed out; >= 1
	catalogIndex uint64 // index of the last registration or removal; >= 1
	catalogCh    chan struct{}
	allCh        chan struct{}
	names        map[string]*nameState
	services     map[string]*serviceState
	checks       map[string]*checkState
	dirty        bool // state changed since the last snapshot
	// stateBytes is the sum of the instances' costs (serviceState.cost);
	// registrations keep it within budget (Config.MaxStateBytes), unless
	// a larger snapshot was loaded.
	stateBytes int64
	budget     int64
	// budgetWarned is set once a refusal for the budget was logged, and
	// cleared by a deregistration.
	budgetWarned bool

	// persist is set when DataDir is, unless its snapshot could not be
	// loaded nor moved aside (then writing one would replace it).
	persist   bool
	persistCh chan struct{}
	writeMu   sync.Mutex // one snapshot write at a time
	// snapshotRetryMin and snapshotRetryMax bound the persister's backoff
	// after a failed write; tests lower them. snapshotHook, when set
	// before the first change, learns the result of every persister write.
	snapshotRetryMin time.Duration
	snapshotRetryMax time.Duration
	snapshotHook     func(error)
	// snapshotEncodeHook, when set before the first change, is called by
	// every snapshot write as it begins to encode the state.
	snapshotEncodeHook func()

	blocking atomic.Int64 // blocking queries in flight
	runners  atomic.Int64 // HTTP and TCP check goroutines running

	httpMu  sync.Mutex
	httpSrv *http.Server
	ln      net.Listener
}

// New validates cfg, loads the snapshot from cfg.DataDir, and starts the
// checks of what it loaded. It does not listen. A snapshot that cannot be
// loaded (unreadable, corrupt, of another version, too big) is not an
// error: it is logged, moved aside to registry.json.unreadable-<time>, and
// the registry starts empty. A DataDir that cannot be created is.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("registryd: %w", err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("registryd: %w", err)
	}
	s := newServer(cfg, clock.Real)
	if cfg.DataDir != "" {
		s.persist = true
		if err := s.loadSnapshot(); err != nil {
			s.cancel()
			return nil, fmt.Errorf("registryd: %w", err)
		}
		if s.persist {
			s.wg.Add(1)
			go s.persister()
		}
	}
	return s, nil
}

func newServer(cfg Config, clk clock.Clock) *Server {
	s := &Server{
		cfg:          cfg,
		log:          cfg.Logger,
		clock:        clk,
		minInterval:  defaultMinInterval,
		datacenter:   "dc1",
		index:        1,
		catalogIndex: 1,
		catalogCh:    make(chan struct{}),
		allCh:        make(chan struct{}),
		names:        map[string]*nameState{},
		services:     map[string]*serviceState{},
		checks:       map[string]*checkState{},
		persistCh:    make(chan struct{}, 1),
		budget:       cmp.Or(cfg.MaxStateBytes, DefaultMaxStateBytes),

		snapshotRetryMin: snapshotRetryMin,
		snapshotRetryMax: snapshotRetryMax,
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// A stable node ID derived from the node name, in Consul's UUID form.
	h := sha256.Sum256([]byte("switchboard-registryd/" + cfg.NodeName))
	s.nodeID = fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	s.nodeAddr = "127.0.0.1"
	if host, _, err := net.SplitHostPort(cfg.Listen); err == nil {
		s.listenHost = host
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			s.nodeAddr = ip.String()
		}
	}
	s.handler = s.newHandler()
	return s
}

// Handler is the registry's HTTP API (ACL, body limits and all), for
// mounting on a server of the caller's own. Start and Serve use it.
// Without an ACL token it answers only requests whose Host is an IP
// address, localhost or the host of Config.Listen (DNS rebinding
// protection), wherever it is mounted.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on Config.Listen and serves in the background until Close.
// It returns once the listener is open.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("registryd: listen %s: %w", s.cfg.Listen, err)
	}
	srv, err := s.attach(ln)
	if err != nil {
		ln.Close()
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("registryd: serving stopped", "listen", ln.Addr().String(), "err", err)
		}
	}()
	return nil
}

// Serve serves the API on ln until Close, like http.Server.Serve; it returns
// nil after Close. A non-loopback ln without a token is refused unless
// Config.Insecure.
func (s *Server) Serve(ln net.Listener) error {
	srv, err := s.attach(ln)
	if err != nil {
		return err
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("registryd: serve %s: %w", ln.Addr(), err)
	}
	return nil
}

func (s *Server) attach(ln net.Listener) (*http.Server, error) {
	if s.cfg.ACLToken == "" && !s.cfg.Insecure {
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
			return nil, fmt.Errorf("registryd: listen: %s is not a loopback address and no acl_token is set; set acl_token or insecure: true", ln.Addr())
		}
	}
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, errClosed
	}
	if s.httpSrv != nil {
		return nil, errors.New("registryd: already serving")
	}
	s.ln = ln
	s.httpSrv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	return s.httpSrv, nil
}

// Addr is the address the server listens on once started, else
// Config.Listen.
func (s *Server) Addr() string {
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	if s.ln != nil {
		return s.ln.Addr().String()
	}
	return s.cfg.Listen
}

// Close stops the listener, the checks and the persister, ends blocking
// queries and watches (they return ErrClosed, or 503 over HTTP), and writes
// a last snapshot. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, c := range s.checks {
		s.stopCheckLocked(c)
	}
	s.cancel()
	s.mu.Unlock()

	var errs []error
	s.httpMu.Lock()
	srv := s.httpSrv
	s.httpMu.Unlock()
	if srv != nil {
		// Handlers end promptly once s.ctx is cancelled (blocking queries
		// watch it), so Shutdown only waits for in-flight quick requests.
		// A connection that never sent a request counts as active for 5s in
		// net/http's Shutdown; past our timeout the rest is closed hard.
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		if err := srv.Shutdown(ctx); err != nil {
			if err := srv.Close(); err != nil {
				errs = append(errs, fmt.Errorf("registryd: close: %w", err))
			}
		}
		cancel()
	}
	s.wg.Wait()
	if s.persist {
		if err := s.writeSnapshot(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
