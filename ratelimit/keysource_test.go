package ratelimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIPHonoursXForwardedForOnlyFromTrustedProxies(t *testing.T) {
	trusted, err := ParseTrustedProxies([]string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		peer    string
		xff     []string
		trusted []netip.Prefix
		want    string
		ok      bool
	}{
		{"untrusted peer: XFF ignored", "203.0.113.5:1234", []string{"198.51.100.7"}, trusted, "203.0.113.5", true},
		{"no trusted proxies configured", "10.0.0.1:1234", []string{"198.51.100.7"}, nil, "10.0.0.1", true},
		{"trusted peer, one hop", "10.0.0.1:1234", []string{"198.51.100.7"}, trusted, "198.51.100.7", true},
		{"single trusted address", "192.0.2.7:1234", []string{"198.51.100.7"}, trusted, "198.51.100.7", true},
		{"forged entries left of the client are skipped", "10.0.0.1:1234", []string{"1.1.1.1, 198.51.100.7, 10.0.0.2"}, trusted, "198.51.100.7", true},
		{"several header lines, rightmost last", "10.0.0.1:1234", []string{"1.1.1.1", "198.51.100.7, 10.0.0.3"}, trusted, "198.51.100.7", true},
		{"every hop trusted: the leftmost", "10.0.0.1:1234", []string{"10.0.0.5, 10.0.0.6"}, trusted, "10.0.0.5", true},
		{"trusted peer without XFF", "10.0.0.1:1234", nil, trusted, "10.0.0.1", true},
		{"garbage stops the walk at the last trusted hop", "10.0.0.1:1234", []string{"198.51.100.7, garbage, 10.0.0.2"}, trusted, "10.0.0.2", true},
		{"garbage right at the peer", "10.0.0.1:1234", []string{"198.51.100.7, not-an-ip"}, trusted, "10.0.0.1", true},
		{"entry with a port", "10.0.0.1:1234", []string{"198.51.100.7:5555"}, trusted, "198.51.100.7", true},
		{"empty entries", "10.0.0.1:1234", []string{"198.51.100.7,, 10.0.0.2 ,"}, trusted, "198.51.100.7", true},
		{"IPv6 peer", "[2001:db9::1]:443", nil, trusted, "2001:db9::1", true},
		{"IPv6 trusted peer, bracketed entry with port", "[2001:db8::9]:443", []string{"[2001:db9::1]:80"}, trusted, "2001:db9::1", true},
		{"non-canonical IPv6 is normalised", "10.0.0.1:1234", []string{"2001:0DB9:0000::0001"}, trusted, "2001:db9::1", true},
		{"IPv4-mapped trusted peer", "[::ffff:10.0.0.1]:80", []string{"198.51.100.7"}, trusted, "198.51.100.7", true},
		{"IPv4-mapped client", "[::ffff:203.0.113.5]:80", nil, trusted, "203.0.113.5", true},
		{"zone dropped", "[fe80::1%eth0]:80", nil, trusted, "fe80::1", true},
		{"peer without port", "203.0.113.5", nil, trusted, "203.0.113.5", true},
		{"unparseable peer", "@", nil, trusted, "", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != nil {
			r.Header["X-Forwarded-For"] = tc.xff
		}
		k := KeySource{Kind: KeyClientIP, TrustedProxies: tc.trusted}
		got, ok := k.Key(r, "web")
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: Key(peer %s, XFF %q) = %q, %v; want %q, %v", tc.name, tc.peer, tc.xff, got, ok, tc.want, tc.ok)
		}
	}
}

func TestKeySourcesOtherThanClientIP(t *testing.T) {
	r := httptest.NewRequest("GET", "/orders/7?x=1", nil)
	r.Header.Set("X-Api-Key", "k1")
	r.Header.Set("X-Empty", "")
	for _, tc := range []struct {
		src  string
		want string
		ok   bool
	}{
		{"header:x-api-key", "k1", true},
		{"header:X-Empty", "", true},
		{"header:X-Missing", "", false},
		{"path", "/orders/7", true},
		{"route", "web/orders", true},
	} {
		k, err := ParseKeySource(tc.src)
		if err != nil {
			t.Fatalf("ParseKeySource(%q): %v", tc.src, err)
		}
		if got, ok := k.Key(r, "web/orders"); got != tc.want || ok != tc.ok {
			t.Errorf("%s: Key = %q, %v; want %q, %v", tc.src, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseKeySourceErrors(t *testing.T) {
	for in, msg := range map[string]string{
		"cookie:sid":    `key: "cookie:sid" is unknown: want client_ip, header:NAME, path or route`,
		"ip":            `key: "ip" is unknown: want client_ip, header:NAME, path or route`,
		"header:":       `key: "header:" needs a header name, as in header:X-Api-Key`,
		"header":        `key: "header" needs a header name, as in header:X-Api-Key`,
		"header:a b":    `key: "header:a b": "a b" is not a valid header name`,
		"client_ip:xff": `key: "client_ip:xff": client_ip takes no name`,
	} {
		_, err := ParseKeySource(in)
		if err == nil || err.Error() != msg {
			t.Errorf("ParseKeySource(%q):\n got %v\nwant %s", in, err, msg)
		}
	}
	if _, err := ParseTrustedProxies([]string{"10.0.0.0/8", "10.0.0.0/33"}); err == nil ||
		err.Error() != `trusted_proxies[1]: "10.0.0.0/33" is not an IP address or CIDR prefix` {
		t.Errorf("ParseTrustedProxies: %v", err)
	}
}

func TestClientIPKeyDoesNotAllocate(t *testing.T) {
	trusted, _ := ParseTrustedProxies([]string{"10.0.0.0/8"})
	k := KeySource{Kind: KeyClientIP, TrustedProxies: trusted}
	for _, tc := range []struct{ peer, xff string }{
		{"203.0.113.5:1234", ""},
		{"[2001:db9::1]:443", ""},
		{"10.0.0.1:1234", "1.1.1.1, 198.51.100.7, 10.0.0.2"},
	} {
		r := &http.Request{RemoteAddr: tc.peer, Header: http.Header{}}
		if tc.xff != "" {
			r.Header["X-Forwarded-For"] = []string{tc.xff}
		}
		if n := testing.AllocsPerRun(100, func() { k.Key(r, "") }); n != 0 {
			t.Errorf("peer %s XFF %q: %v allocations, want 0", tc.peer, tc.xff, n)
		}
	}
}
