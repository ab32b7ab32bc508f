package httpproxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/ratelimit"
)

// TestIPSetMatchesALinearScan: the merged, sorted ranges answer as a scan
// of the prefixes would, for overlapping, nested and adjacent prefixes of
// both families.
func TestIPSetMatchesALinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randAddr := func(v6 bool) netip.Addr {
		if v6 {
			var b [16]byte
			b[0], b[1] = 0x20, 0x01
			for i := 2; i < 16; i++ {
				b[i] = byte(rng.IntN(4)) // few values: prefixes overlap and addresses hit them
			}
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(4)), byte(rng.IntN(256))})
	}
	for round := 0; round < 50; round++ {
		var prefixes []netip.Prefix
		for i := 0; i < 1+rng.IntN(20); i++ {
			v6 := rng.IntN(2) == 0
			a := randAddr(v6)
			bits := 8 + rng.IntN(25)
			if v6 {
				bits = 16 + rng.IntN(113)
			}
			prefixes = append(prefixes, netip.PrefixFrom(a, bits).Masked())
		}
		s := newIPSet(prefixes)
		for i := 0; i < 2000; i++ {
			a := randAddr(rng.IntN(2) == 0)
			want := false
			for _, p := range prefixes {
				want = want || p.Contains(a)
			}
			if got := s.contains(a); got != want {
				t.Fatalf("prefixes %v: contains(%v) = %v, want %v", prefixes, a, got, want)
			}
		}
	}
	all := newIPSet([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")})
	for _, a := range []string{"0.0.0.0", "255.255.255.255", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"} {
		if !all.contains(netip.MustParseAddr(a)) {
			t.Errorf("/0 does not hold %s", a)
		}
	}
	one := newIPSet([]netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("2001:db8::1/128")})
	for a, want := range map[string]bool{"192.0.2.7": true, "192.0.2.6": false, "192.0.2.8": false, "2001:db8::1": true, "2001:db8::2": false} {
		if got := one.contains(netip.MustParseAddr(a)); got != want {
			t.Errorf("single addresses: contains(%s) = %v, want %v", a, got, want)
		}
	}
}

// TestClientAddressLookupAllocatesNothing: the IP check of a request (the
// X-Forwarded-For walk and the set lookup) allocates nothing.
func TestClientAddressLookupAllocatesNothing(t *testing.T) {
	var prefixes []netip.Prefix
	for i := range 1000 {
		prefixes = append(prefixes, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i / 256), byte(i), 0}), 24))
	}
	s := newIPSet(prefixes)
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	xff := []string{"198.51.100.1, 10.3.200.9, 127.0.0.2"}
	n := testing.AllocsPerRun(1000, func() {
		a, ok := ratelimit.ClientAddr("127.0.0.1:5000", xff, trusted)
		if !ok || !s.contains(a) {
			t.Fatal("10.3.200.9 not found")
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per lookup, want 0", n)
	}
}

// BenchmarkIPSet compares the set's lookup in 1000 prefixes with a scan of
// them.
func BenchmarkIPSet(b *testing.B) {
	var prefixes []netip.Prefix
	for i := range 1000 {
		prefixes = append(prefixes, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i / 256), byte(i), 0}), 24))
	}
	a := netip.MustParseAddr("203.0.113.5") // in none: the scan's worst case
	b.Run("set", func(b *testing.B) {
		s := newIPSet(prefixes)
		for b.Loop() {
			if s.contains(a) {
				b.Fatal("found")
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			for _, p := range prefixes {
				if p.Contains(a) {
					b.Fatal("found")
				}
			}
		}
	})
}

func TestParseBasic(t *testing.T) {
	var buf [maxCredentials]byte
	for _, tc := range []struct {
		header     []string
		user, pass string
		ok         bool
	}{
		{[]string{"Basic YWxpY2U6cHc6eA=="}, "alice", "pw:x", true}, // the password may hold colons
		{[]string{"basic YWxpY2U6cHc="}, "alice", "pw", true},       // the scheme ignores case
		{[]string{"Basic YWxpY2U="}, "", "", false},                 // no colon
		{[]string{"Basic !!!"}, "", "", false},
		{[]string{"Bearer YWxpY2U6cHc="}, "", "", false},
		{[]string{"Basic YWxpY2U6cHc=", "Basic YWxpY2U6cHc="}, "", "", false}, // two headers
		{nil, "", "", false},
	} {
		user, pass, ok := parseBasic(tc.header, &buf)
		if ok != tc.ok || string(user) != tc.user || string(pass) != tc.pass {
			t.Errorf("parseBasic(%q) = %q, %q, %v; want %q, %q, %v", tc.header, user, pass, ok, tc.user, tc.pass, tc.ok)
		}
	}
}

// TestCredentialCacheIsBounded: a full cache drops expired entries first,
// then others, and never holds more than credCacheSize.
func TestCredentialCacheIsBounded(t *testing.T) {
	var c credCache
	c.m = map[[32]byte]int64{}
	now := time.Unix(1000, 0)
	key := func(i int) [32]byte { return c.key([]byte{byte(i), byte(i >> 8)}, []byte("pw")) }
	for i := 0; i < credCacheSize; i++ {
		c.add(key(i), now)
	}
	later := now.Add(credTTL)
	if c.has(key(0), later) {
		t.Error("an entry is still good after credTTL")
	}
	c.add(key(credCacheSize), later) // every older entry has expired: all go
	if len(c.m) != 1 || !c.has(key(credCacheSize), later) {
		t.Errorf("after adding to a full cache of expired entries: %d entries, want the new one alone", len(c.m))
	}
	for i := 0; i < 2*credCacheSize; i++ {
		c.add(key(i), later)
	}
	if len(c.m) != credCacheSize {
		t.Errorf("cache holds %d entries, want at most %d", len(c.m), credCacheSize)
	}
}

// TestBasicAuthAnswersBusyWhenNoBcryptSlotFrees: with every bcrypt slot
// taken, a password that is not cached waits for one only as long as its
// client does, then gets 503 auth_busy; a cached one is not held up.
func TestBasicAuthAnswersBusyWhenNoBcryptSlotFrees(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	b := newBasicAuth(&config.BasicAuth{Realm: "r", Users: map[string]string{"alice": string(hash)}})
	h := &Handler{name: "web", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rt := &route{name: "r"}
	now := time.Now()
	request := func(ctx context.Context) *http.Request {
		r := httptest.NewRequest("GET", "http://web/", nil).WithContext(ctx)
		r.SetBasicAuth("alice", "pw")
		return r
	}
	rec := httptest.NewRecorder()
	if st := h.checkBasicAuth(rec, request(context.Background()), rt, b, now); st != 0 {
		t.Fatalf("good credentials: %d %s", st, rec.Body)
	}

	for range cap(bcryptSlots) {
		bcryptSlots <- struct{}{}
	}
	defer func() {
		for range cap(bcryptSlots) {
			<-bcryptSlots
		}
	}()
	rec = httptest.NewRecorder()
	if st := h.checkBasicAuth(rec, request(context.Background()), rt, b, now); st != 0 {
		t.Fatalf("cached credentials with every slot taken: %d %s, want through", st, rec.Body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client has gone: no waiting
	r := request(ctx)
	r.SetBasicAuth("alice", "other")
	rec = httptest.NewRecorder()
	st := h.checkBasicAuth(rec, r, rt, b, now)
	var e struct{ Code string }
	json.Unmarshal(rec.Body.Bytes(), &e)
	if st != 503 || rec.Code != 503 || e.Code != CodeAuthBusy || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("uncached credentials, no slot: %d, %d %s, Retry-After %q; want 503 auth_busy", st, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
}

// TestForwardAuthRequestHeader: without copy_request_headers every
// end-to-end header of the client goes to the auth service, but not the
// hop-by-hop ones, those of a body or the client's X-Forwarded-*; those
// describe this hop, unless the peer is a trusted proxy, whose are kept.
func TestForwardAuthRequestHeader(t *testing.T) {
	f := newForwardAuth(&config.ForwardAuth{URL: "http://auth/check", Timeout: config.Duration(time.Second)})
	newReq := func(peer string) *http.Request {
		r := httptest.NewRequest("PUT", "http://api.example.com/orders/7?x=1", nil)
		r.RemoteAddr = peer
		r.Header = http.Header{
			"Cookie": {"s=1"}, "Authorization": {"Bearer t"}, "Connection": {"close"}, "Content-Type": {"text/plain"},
			"Content-Length": {"3"}, "X-Forwarded-For": {"203.0.113.9"}, "X-Forwarded-Proto": {"https"},
			"X-Forwarded-Host": {"example.com"}, "X-Request-Id": {"abc"},
		}
		return r
	}
	tbl := &Table{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		peer            string
		xff, proto, hst string
	}{
		{"192.0.2.1:4000", "192.0.2.1", "http", "api.example.com"},
		{"10.1.1.1:4000", "203.0.113.9, 10.1.1.1", "https", "example.com"},
	} {
		dst := http.Header{}
		f.header(dst, newReq(tc.peer), tbl)
		want := http.Header{
			"Cookie": {"s=1"}, "Authorization": {"Bearer t"}, "X-Request-Id": {"abc"},
			"X-Forwarded-Method": {"PUT"}, "X-Forwarded-Uri": {"/orders/7?x=1"},
			"X-Forwarded-For": {tc.xff}, "X-Forwarded-Proto": {tc.proto}, "X-Forwarded-Host": {tc.hst},
		}
		if len(dst) != len(want) {
			t.Errorf("peer %s: auth request header %v, want %v", tc.peer, dst, want)
			continue
		}
		for k, v := range want {
			if got := dst[k]; len(got) != 1 || got[0] != v[0] {
				t.Errorf("peer %s: %s = %q, want %q", tc.peer, k, got, v)
			}
		}
	}
	f.reqHeaders = []string{"Cookie", "Content-Length"} // a body header named is still not sent
	dst := http.Header{}
	f.header(dst, newReq("192.0.2.1:4000"), tbl)
	if dst.Get("Cookie") != "s=1" || dst.Get("Authorization") != "" || dst.Get("Content-Length") != "" {
		t.Errorf("copy_request_headers [Cookie]: %v", dst)
	}
}

// discardWriter is a ResponseWriter that keeps its header and drops the
// rest, for benchmarks.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkCheckAccess measures the access checks of one allowed request
// in process, without the proxying around them: an IP allow list of 1000
// prefixes behind a trusted proxy, basic auth with cached credentials,
// and CORS headers for an allowed origin.
func BenchmarkCheckAccess(b *testing.B) {
	hash, err := bcrypt.GenerateFromPassword([]byte("alice-pw"), bcrypt.MinCost)
	if err != nil {
		b.Fatal(err)
	}
	var allow []string
	for i := range 1000 {
		allow = append(allow, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i / 256), byte(i), 0}), 24).String())
	}
	allow = append(allow, "203.0.113.0/24")
	h := &Handler{name: "web", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tbl := &Table{trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, tc := range []struct {
		name   string
		rc     config.Route
		header http.Header
	}{
		{"ip", config.Route{Access: &config.Access{Allow: allow}}, http.Header{"X-Forwarded-For": {"203.0.113.5"}}},
		{"basic", config.Route{BasicAuth: &config.BasicAuth{Realm: "r", Users: map[string]string{"alice": string(hash)}}},
			http.Header{"Authorization": {"Basic YWxpY2U6YWxpY2UtcHc="}}},
		{"cors", config.Route{CORS: &config.CORS{AllowOrigins: []string{"https://app.example.com"}, AllowMethods: []string{"GET"}, ExposeHeaders: []string{"X-Total"}}},
			http.Header{"Origin": {"https://app.example.com"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt := &route{name: tc.name, access: newAccessControl(&tc.rc)}
			r := httptest.NewRequest("GET", "http://web/", nil)
			r.RemoteAddr = "127.0.0.1:5000"
			w := &discardWriter{h: http.Header{}}
			now := time.Now()
			r.Header = http.Header{}
			b.ReportAllocs()
			for b.Loop() {
				for k, v := range tc.header { // basic auth removes Authorization
					r.Header[k] = v
				}
				clear(w.h)
				if _, done := h.checkAccess(w, r, tbl, rt, now); done {
					b.Fatal("refused")
				}
			}
		})
	}
}
