package tcpproxy

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// FuzzParseClientHello feeds the SNI parser arbitrary first bytes of a
// connection: anybody can send them. It must not panic or read past its
// input; a name it returns is a valid lower-case host name; and bytes after
// a complete ClientHello (the rest of the client's flight) change nothing.
//
//	go test -run '^$' -fuzz=FuzzParseClientHello -fuzztime=60s ./proxy/tcpproxy
func FuzzParseClientHello(f *testing.F) {
	full := captureHello(f, "db.example.com")
	f.Add(full)
	f.Add(captureHello(f, ""))
	f.Add(reframe(full, 7))
	f.Add(full[:len(full)/2])
	f.Add(hello(sniExt("a.example.com", "b.example.com")))
	f.Add(hello(nil))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		b = b[:len(b):len(b)] // an append must not write into b's spare capacity
		name, err := parseClientHello(b)
		if err != nil {
			if name != "" {
				t.Fatalf("error %v with a name %q", err, name)
			}
			return
		}
		if len(name) > maxSNINameLen || name != strings.ToLower(name) || strings.HasSuffix(name, ".") {
			t.Fatalf("server name %q: want at most %d lower-case bytes without a trailing dot", name, maxSNINameLen)
		}
		for _, c := range []byte(name) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
				t.Fatalf("server name %q has byte %q", name, c)
			}
		}
		more, err2 := parseClientHello(append(b, 23, 3, 3, 0, 1, 0xff))
		if err2 != nil || more != name {
			t.Fatalf("with bytes after the ClientHello: %q, %v; want %q, nil", more, err2, name)
		}
	})
}

// FuzzParseProxyHeader feeds the PROXY protocol parser arbitrary bytes
// (from a trusted balancer, but a broken one is possible). A header it
// accepts lies within the input, parses the same from exactly its own
// bytes, and its addresses survive being sent on again as v1 and v2.
//
//	go test -run '^$' -fuzz=FuzzParseProxyHeader -fuzztime=60s ./proxy/tcpproxy
func FuzzParseProxyHeader(f *testing.F) {
	v4 := [2]netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:40000"), netip.MustParseAddrPort("198.51.100.2:5432")}
	v6 := [2]netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:40000"), netip.MustParseAddrPort("[2001:db8::2]:443")}
	for _, v := range []string{"v1", "v2"} {
		f.Add(appendProxyHeader(nil, v, v4[0], v4[1]))
		f.Add(appendProxyHeader(nil, v, v6[0], v6[1]))
		f.Add(appendProxyHeader(nil, v, netip.AddrPort{}, netip.AddrPort{}))
	}
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET / HTTP/1.1\r\n"))
	f.Add([]byte("PROXY TCP6 ::1 ::1 65535 0\r\n"))
	f.Add(append(append([]byte{}, proxyV2Sig...), 0x20, 0x00, 0, 0)) // LOCAL
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := parseProxyHeader(b)
		if err != nil {
			if errors.Is(err, errNeedMore) && len(b) >= proxyV2MaxLen {
				t.Fatalf("still wants more after %d bytes; the reader stops at %d", len(b), proxyV2MaxLen)
			}
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("header length %d for %d bytes", n, len(b))
		}
		h2, n2, err := parseProxyHeader(b[:n:n])
		if err != nil || h2 != h || n2 != n {
			t.Fatalf("the header's own %d bytes parse as %+v, %d, %v; want %+v, %d", n, h2, n2, err, h, n)
		}
		if h.local {
			return
		}
		for _, v := range []string{"v1", "v2"} {
			out := appendProxyHeader(nil, v, h.src, h.dst)
			h3, n3, err := parseProxyHeader(out)
			if err != nil || n3 != len(out) || h3.local ||
				h3.src.Addr().Unmap() != h.src.Addr().Unmap() || h3.dst.Addr().Unmap() != h.dst.Addr().Unmap() ||
				h3.src.Port() != h.src.Port() || h3.dst.Port() != h.dst.Port() {
				t.Fatalf("%+v sent on as %s (%q) parses as %+v, %v", h, v, out, h3, err)
			}
		}
		if bytes.Contains(b[:n], []byte{0}) && b[0] == 'P' {
			t.Fatalf("a v1 header with a NUL byte was accepted: %q", b[:n])
		}
	})
}
