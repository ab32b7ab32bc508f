package admin

import (
	"embed"
	"io/fs"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The dashboard's page, script and style, served at /ui/ from the binary:
// no CDN, works offline.
//
//go:embed ui
var uiFiles embed.FS

// uiHandler serves the dashboard's files. The page loads nothing from
// elsewhere, and says so to the browser (Content-Security-Policy), so an
// injected string in a service name or a check's output cannot run.
func uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// list serves one of the Source's lists under key (an empty list when the
// source is nil).
func (s *Server) list(key string, src func() func() any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{key: orEmpty(src())})
	}
}

func orEmpty(f func() any) any {
	if f == nil {
		return []any{}
	}
	if v := f(); v != nil {
		return v
	}
	return []any{}
}

func (s *Server) registry(w http.ResponseWriter, _ *http.Request) {
	if s.src.Registry == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "the embedded registry is not running", "code": "not_found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": s.src.Registry()})
}

// dashboardFamilies are the metric families the dashboard reads, by name:
// it draws rates from their counters between two polls.
var dashboardFamilies = map[string]bool{
	"switchboard_http_requests_total":           true,
	"switchboard_http_request_duration_seconds": true,
	"switchboard_ratelimit_decisions_total":     true,
	"switchboard_concurrency_rejections_total":  true,
	"switchboard_fallback_responses_total":      true,
	"switchboard_upstream_retries_total":        true,
}

// Sample is one series of a metric family in GET /api/v1/dashboard: a
// counter's or gauge's value, or a histogram's count and sum.
type Sample struct {
	Labels map[string]string `json:"labels"`
	Value  float64           `json:"value,omitempty"`
	Count  uint64            `json:"count,omitempty"`
	Sum    float64           `json:"sum,omitempty"`
}

// Dashboard is everything the dashboard shows, in one answer, so that a
// poll sees one moment.
type Dashboard struct {
	Time      time.Time           `json:"time"`
	Listeners any                 `json:"listeners"`
	Upstreams []UpstreamView      `json:"upstreams"`
	Discovery any                 `json:"discovery"`
	TCP       any                 `json:"tcp"`
	Registry  any                 `json:"registry"` // null without the embedded registry
	Reloads   any                 `json:"reloads"`
	Metrics   map[string][]Sample `json:"metrics"`
}

func (s *Server) dashboard(w http.ResponseWriter, _ *http.Request) {
	d := Dashboard{
		Time:      time.Now(),
		Listeners: orEmpty(s.src.Listeners),
		Upstreams: Views(s.src.Upstreams()),
		Discovery: orEmpty(s.src.Discovery),
		TCP:       orEmpty(s.src.TCPListeners),
		Reloads:   orEmpty(s.src.Reloads),
		Metrics:   map[string][]Sample{},
	}
	if s.src.Registry != nil {
		d.Registry = s.src.Registry()
	}
	if mfs, err := s.reg.Gather(); err == nil {
		for _, mf := range mfs {
			if dashboardFamilies[mf.GetName()] {
				d.Metrics[mf.GetName()] = samples(mf)
			}
		}
	}
	writeJSON(w, http.StatusOK, d)
}

func samples(mf *dto.MetricFamily) []Sample {
	out := make([]Sample, 0, len(mf.GetMetric()))
	for _, m := range mf.GetMetric() {
		sm := Sample{Labels: make(map[string]string, len(m.GetLabel()))}
		for _, l := range m.GetLabel() {
			sm.Labels[l.GetName()] = l.GetValue()
		}
		switch {
		case m.Counter != nil:
			sm.Value = m.GetCounter().GetValue()
		case m.Gauge != nil:
			sm.Value = m.GetGauge().GetValue()
		case m.Histogram != nil:
			sm.Count, sm.Sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
		default:
			continue
		}
		out = append(out, sm)
	}
	return out
}
