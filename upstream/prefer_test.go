package upstream_test

import (
	"testing"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/upstream"
)

// TestPickHonoursThePreferredEndpointWhileItCanTakeTraffic: Info.Prefer is
// the pick over round robin, counted in flight; not once it was tried, nor
// once it is ejected.
func TestPickHonoursThePreferredEndpointWhileItCanTakeTraffic(t *testing.T) {
	u, err := upstream.New("app", upstream.Config{Targets: targets("a:1", "b:1", "c:1"),
		Health: upstream.Health{Passive: &health.PassiveConfig{ConsecutiveFailures: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	b := u.Pool().Snapshot().All[1]
	for i := range 6 {
		p, err := u.Pick(&balance.Info{Prefer: b})
		if err != nil {
			t.Fatal(err)
		}
		if p.Endpoint != b {
			t.Fatalf("pick %d went to %s, want the preferred b:1", i, p.Endpoint.Address())
		}
		if b.InFlight() != 1 {
			t.Fatalf("the preferred pick is not counted in flight: %d", b.InFlight())
		}
		p.Done(endpoint.Outcome{Status: 200})
	}
	p, err := u.Pick(&balance.Info{Prefer: b, Tried: []*endpoint.Endpoint{b}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Endpoint == b {
		t.Fatal("a retry went back to the preferred endpoint it had tried")
	}
	p.Done(endpoint.Outcome{Status: 200})

	fail(t, u, "b:1", 1) // ejected
	for range 6 {
		p, err := u.Pick(&balance.Info{Prefer: b})
		if err != nil {
			t.Fatal(err)
		}
		if p.Endpoint == b {
			t.Fatalf("the ejected preferred endpoint was picked (state %s)", b.State())
		}
		p.Done(endpoint.Outcome{Status: 200})
	}
}
