// Package app runs `switchboard serve`: it loads the configuration, starts
// the data plane and the admin API, reloads on SIGHUP or a file change, and
// drains on SIGTERM/SIGINT.
package app

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/switchboard-dev/switchboard/admin"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/plane"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/registries"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/discovery"
	"github.com/switchboard-dev/switchboard/proxy/httpproxy"
	"github.com/switchboard-dev/switchboard/proxy/tcpproxy"
	"github.com/switchboard-dev/switchboard/registryd"
)

// App is one running switchboard.
type App struct {
	path  string
	log   *slog.Logger
	level *slog.LevelVar

	reg      *prometheus.Registry
	plane    *plane.Plane
	regs     *registries.Manager
	embedded *registryd.Server // nil when the registry block is absent
	admin    *admin.Server
	adminLn  net.Listener
	adminHS  *http.Server

	reloadMu sync.Mutex
	cfg      *config.Config
	fileSum  [sha256.Size]byte // of the file last read, applied or not; under reloadMu
	reloads  *prometheus.CounterVec
	reloadOK prometheus.Gauge
	// history is the last reload attempts, for the admin API.
	history reloadHistory

	// Reloaded, if set, is called after every reload attempt with its
	// result (tests wait on it instead of sleeping).
	Reloaded func(error)

	// newWatcher makes the config file's watcher (a test seam).
	newWatcher func() (*fsnotify.Watcher, error)
}

// lockedWriter keeps whole writes to w apart: the process log's and the
// access log encoder's.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Options tune New.
type Options struct {
	// Stderr receives the process log. Default os.Stderr.
	Stderr io.Writer
}

// New loads the configuration at path and starts everything it describes.
// A configuration with problems returns config.Errors and starts nothing.
func New(path string, opt Options) (*App, error) {
	cfg, sum, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	if opt.Stderr == nil {
		opt.Stderr = os.Stderr
	}
	a := &App{path: path, level: new(slog.LevelVar), cfg: cfg, fileSum: sum, newWatcher: fsnotify.NewWatcher}
	a.level.Set(parseLevel(cfg.Log.Level))
	ho := &slog.HandlerOptions{Level: a.level}
	// The HTTP listeners write their access lines to the same stream with
	// their own encoder (the handler's bytes, many lines a write): the
	// handler's writes and theirs take one lock.
	stderr := &lockedWriter{w: opt.Stderr}
	access := httpproxy.AccessLog{Format: httpproxy.AccessLogText, Writer: stderr, Level: a.level}
	if cfg.Log.Format == "json" {
		a.log = slog.New(slog.NewJSONHandler(stderr, ho))
		access.Format = httpproxy.AccessLogJSON
	} else {
		a.log = slog.New(slog.NewTextHandler(stderr, ho))
	}

	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_config_reloads_total",
		Help: "Configuration reload attempts, by result.",
	}, []string{"result"})
	a.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "switchboard_config_last_reload_successful",
		Help: "1 if the last reload attempt succeeded (or none was made), else 0.",
	})
	a.reloadOK.Set(1)
	a.reg.MustRegister(a.reloads, a.reloadOK)

	a.plane = plane.New(a.log, a.reg)
	if err := a.plane.SetAccessLog(access); err != nil {
		return nil, err
	}
	a.regs = registries.New(a.log, a.reg)
	a.plane.SetRegistries(a.regs)
	if cfg.RegistryEnabled() {
		srv, err := startEmbedded(cfg.Registry, a.log)
		if err != nil {
			return nil, err
		}
		a.embedded = srv
		a.regs.SetEmbedded(srv.Discoverer())
		a.plane.SetRouteSource(srv)
	}
	ups := func() []admin.Upstream {
		list := a.plane.Upstreams()
		out := make([]admin.Upstream, len(list))
		for i, u := range list {
			out[i] = u
		}
		return out
	}
	a.reg.MustRegister(admin.NewEndpointCollector(ups), admin.NewBuildInfoCollector())
	status := func() any {
		if l := a.regs.Status(); l != nil {
			return l
		}
		return []discovery.ServiceStatus{}
	}
	src := admin.Source{Upstreams: ups, Reload: a.Reload, Discovery: status, TCPListeners: a.tcpStats,
		Listeners: func() any { return a.plane.Listeners() },
		Reloads:   func() any { return a.Reloads() },
		Explain: func(listener string, r *http.Request) (any, error) {
			return a.plane.Explain(listener, r, time.Now())
		}}
	if a.embedded != nil {
		src.Registry = func() any { return a.embedded.Catalog() }
	}
	a.admin = admin.New(src, a.reg, a.log)
	a.admin.SetToken(cfg.Admin.Token)
	a.admin.SetListen(cfg.Admin.Listen)

	if err := a.apply(cfg); err != nil {
		a.stopAll()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartupWait)
	if waiting := a.regs.WaitReady(ctx); len(waiting) > 0 {
		a.log.Warn("discovery: no answer yet from the registries of these services; their upstreams start empty and fill in when they answer",
			"services", waiting, "waited", StartupWait)
	}
	cancel()
	if cfg.Admin.Enabled == nil || *cfg.Admin.Enabled {
		ln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			a.stopAll()
			return nil, fmt.Errorf("admin: %w", err)
		}
		a.adminLn = ln
		a.adminHS = a.admin.NewHTTPServer()
		go func() {
			if err := a.adminHS.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("admin listener stopped", "error", err)
			}
		}()
	}
	a.log.Info("switchboard started", "config", path, "listeners", len(cfg.Listeners), "upstreams", len(cfg.Upstreams), "auto_routes", autoRouteListeners(cfg), "admin", a.AdminAddr(), "registry", a.RegistryAddr())
	return a, nil
}

// autoRouteListeners counts cfg's listeners whose routes come from the
// registry: their upstreams are not among cfg's, and "auto routes
// applied" says how many they get.
func autoRouteListeners(cfg *config.Config) int {
	n := 0
	for _, l := range cfg.Listeners {
		if l.AutoRoutes {
			n++
		}
	}
	return n
}

// ReloadRecord is one reload attempt, for the admin API.
type ReloadRecord struct {
	At    time.Time `json:"at"`
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
}

// reloadHistory keeps the last keptReloads reload attempts.
type reloadHistory struct {
	mu   sync.Mutex
	last []ReloadRecord // oldest first
}

const keptReloads = 20

func (h *reloadHistory) add(r ReloadRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.last) == keptReloads {
		h.last = append(h.last[:0], h.last[1:]...)
	}
	h.last = append(h.last, r)
}

// Reloads returns the last reload attempts, oldest first.
func (a *App) Reloads() []ReloadRecord {
	a.history.mu.Lock()
	defer a.history.mu.Unlock()
	return append([]ReloadRecord{}, a.history.last...)
}

// tcpStats is the admin API's view of the tcp listeners, by name.
func (a *App) tcpStats() any {
	stats := a.plane.TCPStats()
	slices.SortFunc(stats, func(x, y tcpproxy.Stats) int { return cmp.Compare(x.Listener, y.Listener) })
	return stats
}

// startEmbedded starts the embedded registry.
func startEmbedded(rc *config.Registry, log *slog.Logger) (*registryd.Server, error) {
	srv, err := registryd.New(registryd.Config{
		Listen: rc.Listen, ACLToken: rc.ACLToken, ACLTokenFile: rc.ACLTokenFile, ACLReads: rc.ACLReads,
		Insecure: rc.Insecure, DataDir: rc.DataDir, MaxBodyBytes: int64(rc.MaxBodyBytes),
		MaxStateBytes: int64(rc.MaxStateBytes), NodeName: rc.NodeName,
		Logger: log.With("component", "registry"),
	})
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if err := srv.Start(); err != nil {
		srv.Close()
		return nil, fmt.Errorf("registry: %w", err)
	}
	return srv, nil
}

// apply moves the registries and the data plane to cfg, all or nothing: the
// registries cfg adds or changes are staged for the data plane to prepare
// with, and become current only when the plane took cfg.
func (a *App) apply(cfg *config.Config) error {
	if err := a.regs.Stage(cfg); err != nil {
		return err
	}
	if err := a.plane.Apply(cfg); err != nil {
		a.regs.Rollback()
		return err
	}
	a.regs.Commit(cfg)
	return nil
}

// StartupWait bounds how long serve waits at start for the registries'
// first answers, so that it does not begin with empty pools.
const StartupWait = 5 * time.Second

// stopAll stops what New started, after a failed start.
func (a *App) stopAll() {
	a.plane.Shutdown()
	a.regs.Close()
	if a.embedded != nil {
		a.embedded.Close()
	}
}

// Registry is the embedded registry, or nil.
func (a *App) Registry() *registryd.Server { return a.embedded }

// RegistryAddr is the embedded registry's bound address, or "".
func (a *App) RegistryAddr() string {
	if a.embedded == nil {
		return ""
	}
	return a.embedded.Addr()
}

// Log returns the process logger.
func (a *App) Log() *slog.Logger { return a.log }

// Plane returns the data plane.
func (a *App) Plane() *plane.Plane { return a.plane }

// AdminAddr is the admin listener's bound address, or "".
func (a *App) AdminAddr() string {
	if a.adminLn == nil {
		return ""
	}
	return a.adminLn.Addr().String()
}

// Reload re-reads the configuration file and applies it. A file with
// problems, or one that cannot be applied (a port already in use), leaves
// the running configuration as it was; the error says why.
func (a *App) Reload() error {
	a.reloadMu.Lock()
	err := a.reload()
	a.reloadMu.Unlock()
	if a.Reloaded != nil {
		a.Reloaded(err)
	}
	return err
}

func (a *App) reload() error {
	cfg, sum, err := loadConfig(a.path)
	if sum != ([sha256.Size]byte{}) {
		a.fileSum = sum
	}
	if err == nil {
		err = a.apply(cfg)
	}
	if err != nil {
		a.reloads.WithLabelValues("failure").Inc()
		a.reloadOK.Set(0)
		a.history.add(ReloadRecord{At: time.Now(), OK: false, Error: err.Error()})
		a.log.Error("config reload failed; the previous configuration keeps running", "config", a.path, "error", err.Error())
		return err
	}
	a.reloads.WithLabelValues("success").Inc()
	a.reloadOK.Set(1)
	a.history.add(ReloadRecord{At: time.Now(), OK: true})
	a.level.Set(parseLevel(cfg.Log.Level))
	a.admin.SetToken(cfg.Admin.Token)
	if cfg.Admin.Listen != a.cfg.Admin.Listen || cfg.Log.Format != a.cfg.Log.Format {
		a.log.Warn("admin.listen and log.format take effect on restart only", "config", a.path)
	}
	if !reflect.DeepEqual(cfg.Registry, a.cfg.Registry) {
		a.log.Warn("the registry block takes effect on restart only; the embedded registry keeps its settings", "config", a.path)
	}
	a.cfg = cfg
	a.log.Info("config reloaded", "config", a.path, "listeners", len(cfg.Listeners), "upstreams", len(cfg.Upstreams))
	return nil
}

// Run serves until ctx ends or SIGTERM/SIGINT arrives, reloading on SIGHUP
// and whenever the configuration file changes. Then it drains and returns.
func (a *App) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	changes, closeWatch := a.watch()
	defer closeWatch()
	// The watch began after New read the file: a change written in
	// between raised no event. Catch it up now.
	if a.fileChanged() {
		a.log.Info("config file changed since start: reloading", "config", a.path)
		a.Reload()
	}
	// Ready only now: signals are handled, so a SIGTERM or SIGHUP sent by
	// whoever waited for readiness is never lost.
	a.admin.SetReady(true)
	for {
		select {
		case <-ctx.Done():
			return a.Shutdown()
		case <-hup:
			a.log.Info("SIGHUP: reloading", "config", a.path)
			a.Reload()
		case <-changes:
			a.log.Info("config file changed: reloading", "config", a.path)
			a.Reload()
		}
	}
}

// Shutdown stops accepting, lets in-flight requests finish up to
// shutdown_timeout, and stops the admin API last.
func (a *App) Shutdown() error {
	a.log.Info("shutting down: draining in-flight requests", "timeout", a.cfg.ShutdownTimeout.Std())
	a.admin.SetReady(false)
	a.plane.Shutdown()
	a.regs.Close()
	if a.embedded != nil {
		a.embedded.Close()
	}
	if a.adminHS != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a.adminHS.Shutdown(ctx)
	}
	a.log.Info("stopped")
	return nil
}

// loadConfig reads and parses the configuration at path, and returns the
// SHA-256 of the bytes it read (zero if it could not read them).
func loadConfig(path string) (*config.Config, [sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := config.Parse(path, data)
	return cfg, sha256.Sum256(data), err
}

// fileChanged reports whether the config file now differs from the bytes
// last read (a file that cannot be read is left to the next event).
func (a *App) fileChanged() bool {
	data, err := os.ReadFile(a.path)
	if err != nil {
		return false
	}
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	return sha256.Sum256(data) != a.fileSum
}

// watch reports changes to the config file. It watches the directory, not
// the file, so that editors that replace the file (write and rename) and
// Kubernetes' symlink swaps are seen too. Bursts of events are coalesced
// into one reload.
func (a *App) watch() (<-chan struct{}, func()) {
	out := make(chan struct{}, 1)
	dir := filepath.Dir(a.path)
	w, err := a.newWatcher()
	if err == nil {
		if err = w.Add(dir); err != nil {
			w.Close()
		}
	}
	if err != nil {
		// Out of inotify instances (fs.inotify.max_user_instances, often
		// 128 per user, shared by every process of the user), say: a file
		// change must still reload, so look at the file instead.
		a.log.Error("cannot watch the config file; checking it every second instead", "dir", dir, "error", err, "every", pollEvery)
		return a.poll(out)
	}
	base := filepath.Base(a.path)
	done := make(chan struct{})
	go func() {
		const settle = 100 * time.Millisecond
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		// Events can go missing (some container and network filesystems
		// deliver none for a replaced file): the file is also compared
		// now and then.
		check := time.NewTicker(checkEvery)
		defer check.Stop()
		for {
			select {
			case <-done:
				timer.Stop()
				return
			case <-check.C:
				if a.fileChanged() {
					timer.Reset(0)
				}
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				name := filepath.Base(ev.Name)
				if name == base || name == "..data" {
					timer.Reset(settle)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				// An overflowed event queue may have lost the change:
				// look at the file.
				a.log.Error("config watch error; checking the file", "error", err)
				timer.Reset(settle)
			case <-timer.C:
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, func() { close(done); w.Close() }
}

// pollEvery is how often a config file that cannot be watched is looked
// at; checkEvery how often a watched one is, in case an event went missing.
const (
	pollEvery  = time.Second
	checkEvery = 5 * time.Second
)

// poll reports changes of the config file's content by reading it every
// pollEvery, for when it cannot be watched.
func (a *App) poll(out chan struct{}) (<-chan struct{}, func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(pollEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if a.fileChanged() {
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	return out, func() { close(done) }
}

func parseLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
