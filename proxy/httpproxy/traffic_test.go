package httpproxy

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/switchboard-dev/switchboard/balance"
)

func TestCookieValueFindsOneCookieAmongMany(t *testing.T) {
	h := http.Header{"Cookie": {"a=1; uid=\"u-7\"", "b=2;canary=1 ;c"}}
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"uid", "u-7", true}, {"canary", "1", true}, {"a", "1", true}, {"c", "", false}, {"ui", "", false}, {"x", "", false},
	} {
		if got, ok := cookieValue(h, c.name); got != c.want || ok != c.ok {
			t.Errorf("cookieValue(%q) = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestSplitPickByKeyIsEvenAndStable: keys spread over a 1:1 split close to
// evenly, and one key always picks the same member.
func TestSplitPickByKeyIsEvenAndStable(t *testing.T) {
	a, b := &target{}, &target{}
	rt := &route{traffic: &traffic{members: []*target{a, b}, cum: []uint64{1, 2}, total: 2}}
	k := mustHashKey(t, "header:X-User")
	rt.traffic.key = &k
	counts := map[*target]int{}
	for i := range 10000 {
		r := &http.Request{Header: http.Header{"X-User": {"user-" + itoa(i)}}}
		first := rt.pick(r)
		if rt.pick(r) != first {
			t.Fatalf("key %d picked two members", i)
		}
		counts[first]++
	}
	if counts[a] < 4700 || counts[a] > 5300 {
		t.Fatalf("10000 keys over a 1:1 split: %d and %d", counts[a], counts[b])
	}
}

func TestSplitPickAllocatesNothing(t *testing.T) {
	members := []*target{{}, {}}
	rt := &route{traffic: &traffic{members: members, cum: []uint64{95, 100}, total: 100}}
	r := &http.Request{Header: http.Header{"Cookie": {"uid=abc"}}}
	if n := testing.AllocsPerRun(1000, func() { rt.pick(r) }); n != 0 {
		t.Errorf("a weighted pick allocates %v times", n)
	}
	k := mustHashKey(t, "cookie:uid")
	rt.traffic.key = &k
	if n := testing.AllocsPerRun(1000, func() { rt.pick(r) }); n != 0 {
		t.Errorf("a pick by cookie allocates %v times", n)
	}
}

func mustHashKey(t *testing.T, s string) balance.HashKey {
	t.Helper()
	k, err := balance.ParseHashKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func itoa(i int) string { return strconv.Itoa(i) }

// BenchmarkRoutePick is the split's own cost per request, against a plain
// route's pick in the same run: the proxy-level comparison
// (plane's BenchmarkProxySplit) drowns it in the request's own work.
func BenchmarkRoutePick(b *testing.B) {
	r := &http.Request{Header: http.Header{"Cookie": {"theme=dark; uid=user-42"}}}
	plain := &route{}
	split := &route{traffic: &traffic{members: []*target{{}, {}}, cum: []uint64{95, 100}, total: 100}}
	k, _ := balance.ParseHashKey("cookie:uid")
	sticky := &route{traffic: &traffic{members: []*target{{}, {}}, cum: []uint64{95, 100}, total: 100, key: &k}}
	for _, c := range []struct {
		name string
		rt   *route
	}{{"plain", plain}, {"split_95_5", split}, {"split_95_5_sticky_cookie", sticky}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.rt.pick(r)
			}
		})
	}
}
