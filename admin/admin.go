// Package admin serves switchboard's admin API: Prometheus metrics, liveness
// and readiness, the state of every upstream and endpoint, and the few
// write operations (reload), which always need a bearer token.
package admin

import (
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/rebind"
)

// Upstream is what the admin API shows of one upstream.
type Upstream interface {
	Name() string
	Policy() string
	Protocol() string
	Pool() *endpoint.Pool
	// ConnStats returns open and idle connections per endpoint address, or
	// nil when not tracked.
	ConnStats() map[string][2]int64
}

// Source supplies the admin API's views and actions.
type Source struct {
	// Upstreams lists the running upstreams.
	Upstreams func() []Upstream
	// Reload re-reads the configuration; nil disables POST /api/v1/reload.
	Reload func() error
	// Discovery lists the discovered services (registry, instances, stale,
	// age, last error); nil serves an empty list.
	Discovery func() any
	// TCPListeners lists the tcp listeners' connection counts; nil serves
	// an empty list.
	TCPListeners func() any
	// Listeners lists the listeners and their routes (with their breakers'
	// states); nil serves an empty list.
	Listeners func() any
	// Registry lists the embedded registry's instances and checks; nil
	// when it does not run (GET /api/v1/registry is then 404).
	Registry func() any
	// Reloads lists the last reload attempts; nil serves an empty list.
	Reloads func() any
	// Explain explains how the named listener ("" for the first http one)
	// would handle r (GET /api/v1/explain); an error is the caller's
	// mistake, such as an unknown listener (400). nil: 501.
	Explain func(listener string, r *http.Request) (any, error)
}

// Server is the admin HTTP server.
type Server struct {
	src        Source
	reg        *prometheus.Registry
	token      atomic.Pointer[string]
	listenHost atomic.Pointer[string]
	ready      atomic.Bool
	log        *slog.Logger
	mux        *http.ServeMux
	handler    http.Handler
}

// New returns an admin server over src, exposing the metrics in reg.
func New(src Source, reg *prometheus.Registry, log *slog.Logger) *Server {
	s := &Server{src: src, reg: reg, log: log, mux: http.NewServeMux()}
	empty := ""
	s.token.Store(&empty)
	s.listenHost.Store(&empty)
	s.handler = http.HandlerFunc(s.serve)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /api/v1/upstreams", s.upstreams)
	s.mux.HandleFunc("GET /api/v1/discovery", s.discovery)
	s.mux.HandleFunc("GET /api/v1/tcp", s.tcpListeners)
	s.mux.HandleFunc("GET /api/v1/listeners", s.list("listeners", func() func() any { return s.src.Listeners }))
	s.mux.HandleFunc("GET /api/v1/reloads", s.list("reloads", func() func() any { return s.src.Reloads }))
	s.mux.HandleFunc("GET /api/v1/registry", s.registry)
	s.mux.HandleFunc("GET /api/v1/dashboard", s.dashboard)
	s.mux.HandleFunc("GET /api/v1/explain", s.explain)
	s.mux.Handle("GET /ui/", uiHandler())
	s.mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	s.mux.HandleFunc("POST /api/v1/reload", s.write(s.reload))
	// Profiles reveal internals and cost CPU: like writes, they need the
	// token when one is set.
	s.mux.HandleFunc("/debug/pprof/", s.guard(pprof.Index))
	s.mux.HandleFunc("/debug/pprof/profile", s.guard(pprof.Profile))
	s.mux.HandleFunc("/debug/pprof/trace", s.guard(pprof.Trace))
	s.mux.HandleFunc("/debug/pprof/symbol", s.guard(pprof.Symbol))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no admin endpoint " + r.Method + " " + r.URL.Path, "code": "not_found"})
	})
	return s
}

// SetToken sets the bearer token that writes require ("" refuses writes).
func (s *Server) SetToken(t string) { s.token.Store(&t) }

// SetListen tells the server the address it listens on; without a token
// it answers only requests addressed to that host, an IP address or
// localhost (see Handler).
func (s *Server) SetListen(addr string) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	s.listenHost.Store(&host)
}

// SetReady marks the process ready (serving) or not (starting, draining).
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// Handler returns the admin API's handler. Without a token (the admin API
// is then on loopback) it answers only requests whose Host is an IP
// address, localhost or the listen host (SetListen): a web page that
// rebinds its own DNS name to 127.0.0.1 must not read the upstreams,
// the metrics or the profiles through its visitor's browser.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if *s.token.Load() == "" && !rebind.HostAllowed(r.Host, *s.listenHost.Load()) {
		writeJSON(w, http.StatusForbidden, map[string]string{
			"error": "Host " + strconv.Quote(r.Host) + " is refused: without admin.token the admin API answers only requests addressed to an IP address, localhost or its listen host (DNS rebinding protection)",
			"code":  "forbidden_host",
		})
		return
	}
	s.mux.ServeHTTP(w, r)
}

// NewHTTPServer wraps the handler in an http.Server with the timeouts a
// loopback admin port still needs.
func (s *Server) NewHTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// UpstreamView is the JSON form of an upstream in GET /api/v1/upstreams.
type UpstreamView struct {
	Name      string         `json:"name"`
	Policy    string         `json:"policy"`
	Protocol  string         `json:"protocol"`
	Ready     int            `json:"ready"`
	Total     int            `json:"total"`
	Endpoints []EndpointView `json:"endpoints"`
}

// EndpointView is the JSON form of an endpoint.
type EndpointView struct {
	Address   string    `json:"address"`
	Weight    int       `json:"weight"`
	Zone      string    `json:"zone,omitempty"`
	State     string    `json:"state"`
	Reason    string    `json:"reason"`
	Since     time.Time `json:"since"`
	InFlight  int64     `json:"in_flight"`
	Requests  uint64    `json:"requests"`
	Failures  uint64    `json:"failures"`
	ConnsOpen int64     `json:"connections_open"`
	ConnsIdle int64     `json:"connections_idle"`
}

// Views builds the JSON view of every upstream.
func Views(ups []Upstream) []UpstreamView {
	out := make([]UpstreamView, 0, len(ups))
	for _, u := range ups {
		set := u.Pool().Snapshot()
		conns := u.ConnStats()
		v := UpstreamView{Name: u.Name(), Policy: u.Policy(), Protocol: u.Protocol(), Ready: len(set.Ready), Total: len(set.All), Endpoints: []EndpointView{}}
		for _, ep := range set.All {
			st := ep.Status()
			c := conns[ep.Address()]
			v.Endpoints = append(v.Endpoints, EndpointView{
				Address: ep.Address(), Weight: ep.Weight(), Zone: ep.Zone(),
				State: st.State.String(), Reason: st.Reason, Since: st.Since,
				InFlight: ep.InFlight(), Requests: ep.Requests(), Failures: ep.Failures(),
				ConnsOpen: c[0], ConnsIdle: c[1],
			})
		}
		out = append(out, v)
	}
	return out
}

func (s *Server) upstreams(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"upstreams": Views(s.src.Upstreams())})
}

func (s *Server) discovery(w http.ResponseWriter, _ *http.Request) {
	var list any = []any{}
	if s.src.Discovery != nil {
		if l := s.src.Discovery(); l != nil {
			list = l
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"services": list})
}

func (s *Server) tcpListeners(w http.ResponseWriter, _ *http.Request) {
	var list any = []any{}
	if s.src.TCPListeners != nil {
		list = s.src.TCPListeners()
	}
	writeJSON(w, http.StatusOK, map[string]any{"listeners": list})
}

func (s *Server) reload(w http.ResponseWriter, _ *http.Request) {
	if s.src.Reload == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "reload is not available", "code": "not_implemented"})
		return
	}
	if err := s.src.Reload(); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error(), "code": "reload_failed"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "reloaded"})
}

// write wraps a handler that changes state: it always needs the token.
func (s *Server) write(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if *s.token.Load() == "" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "admin writes are disabled: set admin.token", "code": "forbidden"})
			return
		}
		s.guard(h)(w, r)
	}
}

// guard requires the bearer token when one is set.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		want := *s.token.Load()
		if want != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="switchboard admin"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token", "code": "unauthorized"})
				return
			}
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
