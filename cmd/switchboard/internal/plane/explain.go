package plane

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/proxy/httpproxy"
)

// Explanation answers "where would this request go, and why?" (GET
// /api/v1/explain): the route, with the reason each earlier route did not
// match; the upstream, its policy and which endpoints it picks from now
// (and why each other one is out); and what the route's limits and
// breaker would decide. Finding it forwards nothing and counts nothing.
type Explanation struct {
	// Decision is the answer in one line.
	Decision string             `json:"decision"`
	Routing  httpproxy.Routing  `json:"routing"`
	Upstream *UpstreamExplained `json:"upstream,omitempty"`
	Limits   *pipeline.Decision `json:"limits,omitempty"`
}

// UpstreamExplained is the matched route's upstream as the balancer sees
// it now.
type UpstreamExplained struct {
	Name   string `json:"name"`
	Policy string `json:"policy"`
	// HashKey is where a hashing policy finds the request's key, and
	// HashKeyValue the key this request yields ("" with HashKeyFound
	// false: none, the policy's fallback decides).
	HashKey      string `json:"hash_key,omitempty"`
	HashKeyValue string `json:"hash_key_value,omitempty"`
	HashKeyFound bool   `json:"hash_key_found,omitempty"`
	// HashesTo is the endpoint the policy keeps that key on;
	// BoundedLoad is set when it may move the request on from a full one.
	HashesTo    string `json:"hashes_to,omitempty"`
	BoundedLoad bool   `json:"bounded_load,omitempty"`
	// Eligible is how many endpoints the balancer picks from, of Total.
	Eligible int `json:"eligible"`
	Total    int `json:"total"`
	// Panic is set when too few endpoints are ready (panic_threshold):
	// the balancer then picks from all of them.
	Panic     bool                `json:"panic,omitempty"`
	Endpoints []EndpointExplained `json:"endpoints"`
}

// EndpointExplained is one endpoint: its state, and whether the balancer
// may pick it now; Why says why not.
type EndpointExplained struct {
	Address  string    `json:"address"`
	Weight   int       `json:"weight"`
	Zone     string    `json:"zone,omitempty"`
	State    string    `json:"state"`
	Reason   string    `json:"reason"`
	Since    time.Time `json:"since"`
	InFlight int64     `json:"in_flight"`
	Eligible bool      `json:"eligible"`
	Why      string    `json:"why,omitempty"`
}

// ErrNoListener is Explain's error for a listener that is not a running
// http listener.
type ErrNoListener struct{ Name string }

func (e *ErrNoListener) Error() string {
	if e.Name == "" {
		return "no http listener is running"
	}
	return fmt.Sprintf("listener %q is not a running http listener", e.Name)
}

// Explain explains how the named http listener (the first one when
// listener is "") would handle r at now. r is the request as a client
// would send it: method, Host, RequestURI (the path as sent, query
// allowed), URL, Header and RemoteAddr (the client, for client_ip keys);
// Explain may change r (its path is normalised). The error is an
// *ErrNoListener.
func (p *Plane) Explain(listener string, r *http.Request, now time.Time) (*Explanation, error) {
	if listener == "" {
		if a := p.applied.Load(); a != nil {
			for _, lc := range a.cfg.Listeners {
				if lc.Protocol == "" || lc.Protocol == "http" {
					listener = lc.Name
					break
				}
			}
		}
		if listener == "" {
			return nil, &ErrNoListener{}
		}
	}
	rt, ok := p.http.Explain(listener, r)
	if !ok {
		return nil, &ErrNoListener{Name: listener}
	}
	e := &Explanation{Routing: rt}
	if rt.Pipeline == nil {
		e.Decision = fmt.Sprintf("would be answered %d by switchboard: %s", rt.Status, rt.Error)
		return e, nil
	}
	e.Upstream = explainUpstream(rt.Pipeline, r)
	d := rt.Pipeline.Explain(r, now)
	e.Limits = &d
	e.Decision = decision(rt.Route, e.Upstream, &d)
	if rt.Split != "" {
		e.Decision += "; split: " + rt.Split
	}
	return e, nil
}

func explainUpstream(pipe *pipeline.Route, r *http.Request) *UpstreamExplained {
	up := pipe.Upstream()
	ue := &UpstreamExplained{Name: up.Name(), Policy: up.Policy(), Endpoints: []EndpointExplained{}}
	if ue.Policy == "" {
		ue.Policy = balance.DefaultPolicy
	}
	if hk := up.HashKey(); hk != nil {
		ue.HashKey = hk.String()
		ue.HashKeyValue, ue.HashKeyFound = hk.FromRequest(r)
		if ep, ok := up.HashOwner(ue.HashKeyValue); ok && ue.HashKeyFound {
			ue.HashesTo = ep.Address()
			ue.BoundedLoad = up.Config().Balance.BoundedLoad > 0
		}
	}
	eligible, inPanic := up.Eligible()
	ue.Eligible, ue.Panic = len(eligible), inPanic
	for _, ep := range up.Pool().Snapshot().All {
		st := ep.Status()
		ex := EndpointExplained{Address: ep.Address(), Weight: ep.Weight(), Zone: ep.Zone(),
			State: st.State.String(), Reason: st.Reason, Since: st.Since, InFlight: ep.InFlight()}
		for _, e := range eligible {
			if e == ep {
				ex.Eligible = true
				break
			}
		}
		if !ex.Eligible {
			// "unhealthy: registry: critical"; a reason that names its
			// state already ("ejected: 5 consecutive failures ...") as it is.
			switch {
			case st.Reason == "":
				ex.Why = ex.State
			case strings.HasPrefix(st.Reason, ex.State):
				ex.Why = st.Reason
			default:
				ex.Why = ex.State + ": " + st.Reason
			}
		}
		ue.Endpoints = append(ue.Endpoints, ex)
		ue.Total++
	}
	return ue
}

// decision words the explanation in one line.
func decision(route string, u *UpstreamExplained, d *pipeline.Decision) string {
	var b strings.Builder
	if d.Refused != "" {
		fmt.Fprintf(&b, "route %s would refuse it now (%s); otherwise ", route, d.Refused)
	} else {
		fmt.Fprintf(&b, "route %s: ", route)
	}
	fmt.Fprintf(&b, "would go to upstream %s", u.Name)
	switch {
	case u.Eligible == 0:
		fmt.Fprintf(&b, ", which has no endpoint to pick (%d configured): 503 "+pipeline.CodeNoEndpoint+" unless a fallback answers", u.Total)
	case u.Panic:
		fmt.Fprintf(&b, ", endpoint chosen by %s among all %d endpoints (panic mode: too few are ready)", u.Policy, u.Total)
	default:
		fmt.Fprintf(&b, ", endpoint chosen by %s among %d of %d endpoints", u.Policy, u.Eligible, u.Total)
	}
	if u.HashKey != "" {
		if u.HashKeyFound {
			fmt.Fprintf(&b, " by the key %s=%q", u.HashKey, u.HashKeyValue)
			if u.HashesTo != "" {
				fmt.Fprintf(&b, ", which it keeps on %s", u.HashesTo)
				if u.BoundedLoad {
					b.WriteString(" (bounded_load moves it on while that one is full)")
				}
			}
		} else {
			fmt.Fprintf(&b, " (the request has no %s key: the policy's fallback applies)", u.HashKey)
		}
	}
	for _, ep := range u.Endpoints {
		if !ep.Eligible {
			fmt.Fprintf(&b, "; %s is out: %s", ep.Address, ep.Why)
		}
	}
	return b.String()
}
