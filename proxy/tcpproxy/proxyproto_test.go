package tcpproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

var v2sig = []byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestParseProxyHeaderValid(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		name  string
		in    []byte
		want  proxyHeader
		wantN int
	}{
		{"v1 tcp4", []byte("PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\nrest"),
			proxyHeader{src: ap("192.0.2.1:51234"), dst: ap("198.51.100.2:443")}, 45},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n"),
			proxyHeader{src: ap("[2001:db8::1]:1"), dst: ap("[2001:db8::2]:65535")}, 44},
		{"v1 port 0", []byte("PROXY TCP4 10.0.0.1 10.0.0.2 0 80\r\n"),
			proxyHeader{src: ap("10.0.0.1:0"), dst: ap("10.0.0.2:80")}, 35},
		{"v1 unknown short", []byte("PROXY UNKNOWN\r\n"), proxyHeader{local: true}, 15},
		{"v1 unknown long", []byte("PROXY UNKNOWN ffff::1 ffff::2 65535 65535\r\nx"), proxyHeader{local: true}, 43},
		{"v2 tcp4", cat(v2sig, []byte{0x21, 0x11, 0x00, 0x0C, 192, 0, 2, 1, 198, 51, 100, 2, 0xC8, 0x22, 0x01, 0xBB}, []byte("data")),
			proxyHeader{src: ap("192.0.2.1:51234"), dst: ap("198.51.100.2:443")}, 28},
		{"v2 tcp6", cat(v2sig, []byte{0x21, 0x21, 0x00, 0x24},
			netip.MustParseAddr("2001:db8::1").AsSlice(), netip.MustParseAddr("2001:db8::2").AsSlice(), []byte{0x04, 0xD2, 0x01, 0xBB}),
			proxyHeader{src: ap("[2001:db8::1]:1234"), dst: ap("[2001:db8::2]:443")}, 52},
		{"v2 tcp4 with TLVs", cat(v2sig, []byte{0x21, 0x11, 0x00, 0x12, 10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2, 0x04, 0x00, 0x03, 'a', 'b', 'c'}),
			proxyHeader{src: ap("10.0.0.1:1"), dst: ap("10.0.0.2:2")}, 34},
		{"v2 local", cat(v2sig, []byte{0x20, 0x00, 0x00, 0x00}), proxyHeader{local: true}, 16},
		{"v2 local with addresses", cat(v2sig, []byte{0x20, 0x11, 0x00, 0x0C}, make([]byte, 12)), proxyHeader{local: true}, 28},
		{"v2 proxy unspec", cat(v2sig, []byte{0x21, 0x00, 0x00, 0x00}), proxyHeader{local: true}, 16},
		{"v2 udp4 falls back", cat(v2sig, []byte{0x21, 0x12, 0x00, 0x0C}, make([]byte, 12)), proxyHeader{local: true}, 28},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, n, err := parseProxyHeader(tt.in)
			if err != nil {
				t.Fatalf("parse %q: %v", tt.in, err)
			}
			if h != tt.want || n != tt.wantN {
				t.Fatalf("got %+v, %d; want %+v, %d", h, n, tt.want, tt.wantN)
			}
			// Every strict prefix asks for more, never errs.
			for i := 0; i < tt.wantN; i++ {
				if _, _, err := parseProxyHeader(tt.in[:i]); !errors.Is(err, errNeedMore) {
					t.Fatalf("prefix of %d bytes: %v, want errNeedMore", i, err)
				}
			}
		})
	}
}

func TestParseProxyHeaderInvalid(t *testing.T) {
	long := "PROXY TCP6 " + strings.Repeat("f", 100)
	tests := []struct {
		name, in, want string
	}{
		{"plain data", "GET / HTTP/1.1\r\n", "no PROXY header"},
		{"lower case", "proxy TCP4 1.2.3.4 1.2.3.4 1 2\r\n", "no PROXY header"},
		{"bad protocol", "PROXY UDP4 1.2.3.4 1.2.3.4 1 2\r\n", "TCP4, TCP6 or UNKNOWN"},
		{"double space", "PROXY TCP4 1.2.3.4  1.2.3.4 1 2\r\n", "want 4 fields"},
		{"missing port", "PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n", "want 4 fields"},
		{"extra field", "PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n", "want 4 fields"},
		{"v6 in tcp4", "PROXY TCP4 ::1 ::1 1 2\r\n", "not IPv4"},
		{"v4 in tcp6", "PROXY TCP6 1.2.3.4 1.2.3.4 1 2\r\n", "not a plain IPv6"},
		{"leading zero octet", "PROXY TCP4 01.2.3.4 1.2.3.4 1 2\r\n", "address"},
		{"leading zero port", "PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n", "leading zeroes"},
		{"port too big", "PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n", "0 to 65535"},
		{"bare LF", "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n", "without CRLF"},
		{"CR not LF", "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\rx", "without CRLF"},
		{"no CRLF in 107", long, "no CRLF in the first 107"},
		{"v2 bad signature", "\r\n\r\n\x00\r\nQUIX\n\x21\x11\x00\x00", "bad signature"},
		{"v2 version 1", string(v2sig) + "\x11\x11\x00\x0c", "version 1"},
		{"v2 command 2", string(v2sig) + "\x22\x11\x00\x0c", "unknown command"},
		{"v2 family 4", string(v2sig) + "\x21\x41\x00\x0c", "unknown address family"},
		{"v2 protocol 3", string(v2sig) + "\x21\x13\x00\x0c", "unknown address family"},
		{"v2 short tcp4", string(v2sig) + "\x21\x11\x00\x04\x01\x02\x03\x04", "needs 12 address bytes"},
		{"v2 short tcp6", string(v2sig) + "\x21\x21\x00\x0c" + strings.Repeat("\x00", 12), "needs 36 address bytes"},
		{"v2 too long", string(v2sig) + "\x21\x11\xff\xff", "over our limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseProxyHeader([]byte(tt.in))
			if err == nil || errors.Is(err, errNeedMore) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse %q: error %v, want one containing %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestAppendProxyHeaderBytes(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		name, version string
		src, dst      netip.AddrPort
		want          []byte
	}{
		{"v1 tcp4", "v1", ap("192.0.2.1:51234"), ap("198.51.100.2:443"), []byte("PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\n")},
		{"v1 tcp6", "v1", ap("[2001:db8::1]:1234"), ap("[2001:db8::2]:443"), []byte("PROXY TCP6 2001:db8::1 2001:db8::2 1234 443\r\n")},
		{"v1 mapped v4 is tcp4", "v1", ap("[::ffff:192.0.2.1]:1"), ap("198.51.100.2:2"), []byte("PROXY TCP4 192.0.2.1 198.51.100.2 1 2\r\n")},
		{"v1 mixed families is tcp6", "v1", ap("192.0.2.1:1"), ap("[2001:db8::2]:2"), []byte("PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 1 2\r\n")},
		{"v1 unknown", "v1", netip.AddrPort{}, ap("198.51.100.2:2"), []byte("PROXY UNKNOWN\r\n")},
		{"v2 tcp4", "v2", ap("192.0.2.1:51234"), ap("198.51.100.2:443"),
			cat(v2sig, []byte{0x21, 0x11, 0x00, 0x0C, 192, 0, 2, 1, 198, 51, 100, 2, 0xC8, 0x22, 0x01, 0xBB})},
		{"v2 tcp6", "v2", ap("[2001:db8::1]:1234"), ap("[2001:db8::2]:443"),
			cat(v2sig, []byte{0x21, 0x21, 0x00, 0x24,
				0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
				0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2,
				0x04, 0xD2, 0x01, 0xBB})},
		{"v2 unspec", "v2", netip.AddrPort{}, netip.AddrPort{}, cat(v2sig, []byte{0x21, 0x00, 0x00, 0x00})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := appendProxyHeader(nil, tt.version, tt.src, tt.dst)
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("got  % x\nwant % x", got, tt.want)
			}
		})
	}
}

// recorder is a backend that reports the first n bytes it receives, then
// echoes the rest.
func recorder(n int, got chan<- []byte) func(c *net.TCPConn) {
	sizes := make(chan int, 1)
	sizes <- n
	return recorderSized(sizes, got)
}

// recorderSized is a recorder told each connection's n once the test
// knows it (a header's length depends on the client's port).
func recorderSized(sizes <-chan int, got chan<- []byte) func(c *net.TCPConn) {
	return func(c *net.TCPConn) {
		var n int
		select {
		case n = <-sizes:
		case <-time.After(5 * time.Second):
			got <- []byte("recorder: not told how much to read")
			return
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			got <- []byte("recorder: " + err.Error())
			return
		}
		c.SetReadDeadline(time.Time{})
		got <- b
		echo(c)
	}
}

func expectBytes(t *testing.T, got <-chan []byte, want []byte) {
	t.Helper()
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("upstream received\n  %q\nwant\n  %q", b, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("upstream received nothing within 5s")
	}
}

func localAddrs(t *testing.T, c net.Conn) (src, dst netip.AddrPort) {
	t.Helper()
	return c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
}

func TestSendProxyProtocolV1(t *testing.T) {
	got, sizes := make(chan []byte, 1), make(chan int, 1)
	rec := startServer(t, recorderSized(sizes, got))
	up := newUpstream(t, "app", rr(), rec.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", SendProxyProtocol: "v1"}, up)
	c := p.dial(t)
	src, dst := localAddrs(t, c)
	want := fmt.Sprintf("PROXY TCP4 127.0.0.1 127.0.0.1 %d %d\r\nhello", src.Port(), dst.Port())
	sizes <- len(want)
	c.Write([]byte("hello"))
	expectBytes(t, got, []byte(want))
	roundTrip(t, c, "echo works after the header")
}

func TestSendProxyProtocolV2(t *testing.T) {
	got := make(chan []byte, 1)
	rec := startServer(t, recorder(28+5, got))
	up := newUpstream(t, "app", rr(), rec.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", SendProxyProtocol: "v2"}, up)
	c := p.dial(t)
	src, dst := localAddrs(t, c)
	c.Write([]byte("hello"))
	want := cat(v2sig, []byte{0x21, 0x11, 0x00, 0x0C, 127, 0, 0, 1, 127, 0, 0, 1,
		byte(src.Port() >> 8), byte(src.Port()), byte(dst.Port() >> 8), byte(dst.Port())}, []byte("hello"))
	expectBytes(t, got, want)
	roundTrip(t, c, "echo works after the header")
}

// TestAcceptProxyProtocolFromTrustedSource: the header from a trusted
// source is consumed, its addresses are what the upstream's own PROXY
// header carries, its source IP is the hash key, and the bytes after it
// (in the same segment) are forwarded.
func TestAcceptProxyProtocolFromTrustedSource(t *testing.T) {
	tests := []struct {
		name, send string
		in         []byte
		want       []byte
	}{
		{"v1 in, v2 out", "v2", []byte("PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\nhello"),
			cat(v2sig, []byte{0x21, 0x11, 0x00, 0x0C, 192, 0, 2, 1, 198, 51, 100, 2, 0xC8, 0x22, 0x01, 0xBB}, []byte("hello"))},
		{"v2 tcp6 in, v1 out", "v1", cat(v2sig, []byte{0x21, 0x21, 0x00, 0x24},
			netip.MustParseAddr("2001:db8::1").AsSlice(), netip.MustParseAddr("2001:db8::2").AsSlice(), []byte{0x04, 0xD2, 0x01, 0xBB}, []byte("hello")),
			[]byte("PROXY TCP6 2001:db8::1 2001:db8::2 1234 443\r\nhello")},
		{"v2 with TLVs in, v1 out", "v1", cat(v2sig, []byte{0x21, 0x11, 0x00, 0x12, 10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2, 0x04, 0x00, 0x03, 'a', 'b', 'c'}, []byte("hello")),
			[]byte("PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\nhello")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan []byte, 1)
			rec := startServer(t, recorder(len(tt.want), got))
			up := newUpstream(t, "app", rr(), rec.addr)
			keys := make(chan string, 1)
			up.onPick = func(info *balance.Info) { keys <- info.Key }
			p := startProxy(t, Config{Name: "t", Upstream: "app", SendProxyProtocol: tt.send,
				AcceptProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, up)
			c := p.dial(t)
			c.Write(tt.in)
			expectBytes(t, got, tt.want)
			roundTrip(t, c, "echo")
			wantKey := map[string]string{"v1 in, v2 out": "192.0.2.1", "v2 tcp6 in, v1 out": "2001:db8::1", "v2 with TLVs in, v1 out": "10.0.0.1"}[tt.name]
			if k := <-keys; k != wantKey {
				t.Errorf("hash key %q, want the PROXY header's source %q", k, wantKey)
			}
		})
	}
}

// TestAcceptProxyProtocolLocal: a LOCAL header (a balancer's health check)
// means the real addresses.
func TestAcceptProxyProtocolLocal(t *testing.T) {
	got, sizes := make(chan []byte, 1), make(chan int, 1)
	rec := startServer(t, recorderSized(sizes, got))
	up := newUpstream(t, "app", rr(), rec.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", SendProxyProtocol: "v1",
		AcceptProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, up)
	c := p.dial(t)
	src, dst := localAddrs(t, c)
	want := fmt.Sprintf("PROXY TCP4 127.0.0.1 127.0.0.1 %d %d\r\nhi", src.Port(), dst.Port())
	sizes <- len(want)
	c.Write(cat(v2sig, []byte{0x20, 0x00, 0x00, 0x00}, []byte("hi")))
	expectBytes(t, got, []byte(want))
}

// TestUntrustedSourceIsNotParsed: a connection from outside
// trusted_proxies that sends a PROXY header has it forwarded as data, and
// the upstream's header carries the real address.
func TestUntrustedSourceIsNotParsed(t *testing.T) {
	spoof := "PROXY TCP4 6.6.6.6 198.51.100.2 51234 443\r\n"
	got := make(chan []byte, 1)
	rec := startServer(t, recorder(28+len(spoof)+5, got))
	up := newUpstream(t, "app", rr(), rec.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app", SendProxyProtocol: "v2",
		AcceptProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, up)
	c := p.dial(t)
	src, dst := localAddrs(t, c)
	c.Write([]byte(spoof + "hello"))
	want := cat(v2sig, []byte{0x21, 0x11, 0x00, 0x0C, 127, 0, 0, 1, 127, 0, 0, 1,
		byte(src.Port() >> 8), byte(src.Port()), byte(dst.Port() >> 8), byte(dst.Port())}, []byte(spoof+"hello"))
	expectBytes(t, got, want)
}

func TestTrustedSourceWithoutValidHeaderIsClosed(t *testing.T) {
	b := startServer(t, echo)
	up := newUpstream(t, "app", rr(), b.addr)
	const timeout = 150 * time.Millisecond
	p := startProxy(t, Config{Name: "t", Upstream: "app", ProxyProtocolTimeout: timeout,
		AcceptProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, up)

	garbage := p.dial(t)
	garbage.Write([]byte("hello, no header here\r\n"))
	if took := expectClosed(t, garbage, 5*time.Second); took >= timeout {
		t.Errorf("invalid header: closed after %v, want at once (before the %v timeout)", took, timeout)
	}

	silent := p.dial(t)
	if took := expectClosed(t, silent, 5*time.Second); took < timeout-10*time.Millisecond {
		t.Errorf("silent trusted source closed after %v, before proxy_protocol_timeout %v", took, timeout)
	}

	partial := p.dial(t)
	partial.Write([]byte("PROXY TCP4 192.0.2.1"))
	expectClosed(t, partial, 5*time.Second)

	testutil.WaitFor(t, 5*time.Second, "rejected{proxy_protocol} = 3", func() bool { return p.rejected(RejectProxyProtocol) == 3 })
	if n := b.accepts(); n != 0 {
		t.Errorf("the backend saw %d connections, want 0", n)
	}
}
