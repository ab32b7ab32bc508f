package fallback

import (
	"fmt"
	"strconv"
	"strings"
)

// Trigger is a bit set of the events that start a fallback chain.
type Trigger uint8

// The events of a route's fallback "on:" list.
const (
	BreakerOpen       Trigger = 1 << iota // the route's breaker is open: no upstream call at all
	NoHealthyEndpoint                     // the pool has no endpoint to pick
	RetriesExhausted                      // every attempt failed, or the budget refused a retry
	StatusCode                            // the upstream answered a configured status (see Triggers)
)

var triggerNames = []struct {
	t    Trigger
	name string
}{{BreakerOpen, "breaker_open"}, {NoHealthyEndpoint, "no_healthy_endpoint"}, {RetriesExhausted, "retries_exhausted"}}

// String is the config name of a single trigger ("status" for StatusCode).
// It is also the reason in X-Switchboard-Degraded.
func (t Trigger) String() string {
	for _, n := range triggerNames {
		if n.t == t {
			return n.name
		}
	}
	if t == StatusCode {
		return "status"
	}
	return fmt.Sprintf("trigger(%d)", uint8(t))
}

// Triggers is a parsed "on:" list: events plus status codes. The zero value
// triggers on nothing. It is a value without pointers, so Match does not
// allocate.
type Triggers struct {
	events   Trigger
	statuses [8]uint64 // bit s-100 for status s in 100..599
}

// DefaultTriggers is what an empty "on:" list means: breaker_open,
// no_healthy_endpoint and retries_exhausted, and no status codes.
func DefaultTriggers() Triggers {
	return Triggers{events: BreakerOpen | NoHealthyEndpoint | RetriesExhausted}
}

// ParseTriggers parses a fallback "on:" list: breaker_open,
// no_healthy_endpoint, retries_exhausted and status:CODE (status:503). An
// empty list gives DefaultTriggers.
func ParseTriggers(list []string) (Triggers, error) {
	if len(list) == 0 {
		return DefaultTriggers(), nil
	}
	var t Triggers
	for _, s := range list {
		if code, ok := strings.CutPrefix(s, "status:"); ok {
			n, err := strconv.Atoi(code)
			if err != nil || n < 100 || n > 599 {
				return Triggers{}, fmt.Errorf("trigger %q: %q is not an HTTP status (100-599)", s, code)
			}
			t.events |= StatusCode
			t.statuses[(n-100)/64] |= 1 << ((n - 100) % 64)
			continue
		}
		found := false
		for _, n := range triggerNames {
			if n.name == s {
				t.events |= n.t
				found = true
			}
		}
		if !found {
			return Triggers{}, fmt.Errorf("trigger %q is unknown (known: breaker_open, no_healthy_endpoint, retries_exhausted, status:CODE)", s)
		}
	}
	return t, nil
}

// On reports whether the event t (BreakerOpen, NoHealthyEndpoint,
// RetriesExhausted) triggers the chain.
func (ts Triggers) On(t Trigger) bool { return t != StatusCode && ts.events&t != 0 }

// OnStatus reports whether an upstream response with this status triggers
// the chain.
func (ts Triggers) OnStatus(status int) bool {
	if status < 100 || status > 599 {
		return false
	}
	n := status - 100
	return ts.statuses[n/64]&(1<<(n%64)) != 0
}
