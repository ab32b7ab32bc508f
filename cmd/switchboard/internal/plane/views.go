package plane

import (
	"time"

	"github.com/switchboard-dev/switchboard/pipeline"
)

// ListenerView is what the admin API and the dashboard show of one
// listener: its address and its routes as they run now, auto routes
// included.
type ListenerView struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Listen   string `json:"listen"`
	// Addr is the bound address (the port chosen for port 0).
	Addr string `json:"addr"`
	TLS  bool   `json:"tls"`
	// Engine is the engine a listener runs on now: goroutine or
	// eventloop (an http listener's HTTP/1.1 engine, a tcp listener's
	// connection engine).
	Engine   string      `json:"engine,omitempty"`
	Routes   []RouteView `json:"routes,omitempty"`
	Upstream string      `json:"upstream,omitempty"` // a tcp listener's
	Auto     bool        `json:"auto_routes,omitempty"`
}

// RouteView is one route of a listener.
type RouteView struct {
	Name       string   `json:"name"`
	Host       string   `json:"host,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	Methods    []string `json:"methods,omitempty"`
	Upstream   string   `json:"upstream"`
	// Breaker is the route breaker's state and recent changes; nil
	// without one.
	Breaker *BreakerView `json:"breaker,omitempty"`
	// Limits names the route's protections: rate_limit, concurrency,
	// retry, fallback.
	Limits []string `json:"limits,omitempty"`
}

// BreakerView is a route breaker's state and its last changes.
type BreakerView struct {
	State  string                       `json:"state"`
	Recent []pipeline.BreakerTransition `json:"recent"`
}

// Listeners returns the running listeners and their routes, in
// configuration order.
func (p *Plane) Listeners() []ListenerView {
	a := p.applied.Load()
	if a == nil {
		return []ListenerView{}
	}
	now := time.Now()
	out := make([]ListenerView, 0, len(a.cfg.Listeners))
	for _, lc := range a.cfg.Listeners {
		lv := ListenerView{Name: lc.Name, Protocol: lc.Protocol, Listen: lc.Listen, Addr: p.Addr(lc.Name),
			TLS: lc.TLS != nil, Upstream: lc.Upstream, Auto: lc.AutoRoutes}
		if lv.Protocol == "" {
			lv.Protocol = "http"
		}
		if lv.Protocol == "http" {
			lv.Engine = p.http.Engine(lc.Name)
		} else {
			lv.Engine = p.tcp.Engine(lc.Name)
		}
		for _, rc := range lc.Routes {
			rv := RouteView{Name: rc.Name, Host: rc.Match.Host, PathPrefix: rc.Match.PathPrefix, Methods: rc.Match.Methods, Upstream: rc.Upstream}
			if r := a.routes[rc.Name]; r != nil {
				if state, recent, ok := r.Breaker(now); ok {
					rv.Breaker = &BreakerView{State: state, Recent: recent}
				}
			}
			if len(rc.RateLimit) > 0 {
				rv.Limits = append(rv.Limits, "rate_limit")
			}
			if rc.Concurrency != nil {
				rv.Limits = append(rv.Limits, "concurrency")
			}
			if rc.Retry != nil {
				rv.Limits = append(rv.Limits, "retry")
			}
			if rc.Fallback != nil {
				rv.Limits = append(rv.Limits, "fallback")
			}
			lv.Routes = append(lv.Routes, rv)
		}
		out = append(out, lv)
	}
	return out
}
