package tcpproxy

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// captureHello returns the bytes crypto/tls sends as its ClientHello for
// serverName: its first flight, one or more records.
func captureHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	for {
		h := make([]byte, 5)
		if _, err := io.ReadFull(b, h); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint16(h[3:5]))
		if _, err := io.ReadFull(b, body); err != nil {
			t.Fatal(err)
		}
		out = append(append(out, h...), body...)
		if _, err := parseClientHello(out); !errors.Is(err, errNeedMore) {
			return out
		}
	}
}

// reframe splits the handshake message carried by one record into records
// of at most size bytes each.
func reframe(rec []byte, size int) []byte {
	msg := rec[5:]
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, 22, rec[1], rec[2], byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func TestParseClientHelloFromCryptoTLS(t *testing.T) {
	hello := captureHello(t, "API.Example.com")
	for name, b := range map[string][]byte{
		"one record":     hello,
		"two records":    reframe(hello, (len(hello)-5)/2+1),
		"eight records":  reframe(hello, (len(hello)-5)/8+1),
		"100-byte pages": reframe(hello, 100),
	} {
		if name == "100-byte pages" && len(hello)-5 > 800 {
			continue // more than 8 records: refused, tested below
		}
		t.Run(name, func(t *testing.T) {
			got, err := parseClientHello(b)
			if err != nil || got != "api.example.com" {
				t.Fatalf("got %q, %v; want \"api.example.com\"", got, err)
			}
			for i := 0; i < len(b); i++ {
				if _, err := parseClientHello(b[:i]); !errors.Is(err, errNeedMore) {
					t.Fatalf("prefix of %d/%d bytes: %v, want errNeedMore", i, len(b), err)
				}
			}
			withData := append(append([]byte{}, b...), 23, 3, 3, 0, 1, 0)
			if got, err := parseClientHello(withData); err != nil || got != "api.example.com" {
				t.Fatalf("with bytes after the ClientHello: %q, %v", got, err)
			}
		})
	}
	if _, err := parseClientHello(reframe(hello, (len(hello)-5)/9+1)); err == nil || !strings.Contains(err.Error(), "more than 8 records") {
		t.Errorf("nine records: %v, want refused", err)
	}
	noSNI := captureHello(t, "")
	if got, err := parseClientHello(noSNI); err != nil || got != "" {
		t.Errorf("ClientHello without server_name: %q, %v; want \"\", nil", got, err)
	}
}

// hello builds a ClientHello record with the given extensions block (nil:
// no extensions at all).
func hello(exts []byte) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session_id
	body = append(body, 0, 2, 0x13, 0x01)    // cipher_suites
	body = append(body, 1, 0)                // compression_methods
	if exts != nil {
		body = binary.BigEndian.AppendUint16(body, uint16(len(exts)))
		body = append(body, exts...)
	}
	msg := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{22, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

func sniExt(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0)
		list = binary.BigEndian.AppendUint16(list, uint16(len(n)))
		list = append(list, n...)
	}
	data := binary.BigEndian.AppendUint16(nil, uint16(len(list)))
	data = append(data, list...)
	ext := []byte{0, 0}
	ext = binary.BigEndian.AppendUint16(ext, uint16(len(data)))
	return append(ext, data...)
}

func TestParseClientHelloHandBuilt(t *testing.T) {
	other := []byte{0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04} // supported_versions
	good := []struct {
		name string
		in   []byte
		want string
	}{
		{"no extensions", hello(nil), ""},
		{"other extensions only", hello(other), ""},
		{"sni after others", hello(append(append([]byte{}, other...), sniExt("a.example.com")...)), "a.example.com"},
		{"trailing dot dropped", hello(sniExt("a.example.com.")), "a.example.com"},
		{"upper case lowered", hello(sniExt("A.EXAMPLE.com")), "a.example.com"},
	}
	for _, tt := range good {
		if got, err := parseClientHello(tt.in); err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	huge := hello(nil)
	huge[5+1], huge[5+2], huge[5+3] = 0x01, 0x00, 0x00 // message length 65536
	bad := []struct {
		name string
		in   []byte
		want string
	}{
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), "record type 71"},
		{"one garbage byte", []byte{0x80}, "record type 128"},
		{"application data", []byte{23, 3, 3, 0, 5, 1, 2, 3, 4, 5}, "record type 23"},
		{"ssl2 version", []byte{22, 2, 0, 0, 5, 1, 0, 0, 1, 0}, "not TLS"},
		{"empty record", []byte{22, 3, 1, 0, 0}, "record length 0"},
		{"record too long", []byte{22, 3, 1, 0x40, 0x01}, "record length 16385"},
		{"server hello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, "want 1 (ClientHello)"},
		{"partial record of another message", []byte{22, 3, 3, 0, 40, 2}, "want 1 (ClientHello)"},
		{"hello over 16 KiB", huge, "over our limit"},
		{"two sni extensions", hello(append(sniExt("a.example.com"), sniExt("b.example.com")...)), "two server_name extensions"},
		{"two host names", hello(sniExt("a.example.com", "b.example.com")), "two host names"},
		{"bad character", hello(sniExt("a b.example.com")), "not allowed"},
		{"empty name", hello(sniExt("")), "bad entry"},
		{"truncated extension", hello([]byte{0, 0, 0, 9, 0}), "truncated extension"},
		{"short body", []byte{22, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3}, "too short"},
	}
	for _, tt := range bad {
		_, err := parseClientHello(tt.in)
		if err == nil || errors.Is(err, errNeedMore) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// tlsBackend is a crypto/tls server that writes its name after the
// handshake, then echoes.
func tlsBackend(t *testing.T, name string) *server {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := testutil.WriteKeyPair(t, dir, "srv")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	return startServer(t, func(c *net.TCPConn) {
		tc := tls.Server(c, cfg)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			return
		}
		tc.Write([]byte(name + "\n"))
		io.Copy(tc, tc)
	})
}

func tlsDial(t *testing.T, addr, serverName string) (*tls.Conn, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func TestSNIRoutesByName(t *testing.T) {
	a, b, d := tlsBackend(t, "a"), tlsBackend(t, "b"), tlsBackend(t, "default")
	ups := []*testUpstream{newUpstream(t, "a", rr(), a.addr), newUpstream(t, "b", rr(), b.addr), newUpstream(t, "d", rr(), d.addr)}
	p := startProxy(t, Config{Name: "t", Upstream: "d", SNI: []SNIRoute{
		{Names: []string{"a.example.com", "A2.example.com"}, Upstream: "a"},
		{Names: []string{"*.b.example.com"}, Upstream: "b"},
	}}, ups...)
	for _, tt := range []struct{ sni, want string }{
		{"a.example.com", "a"},
		{"A.Example.COM", "a"},
		{"a2.example.com", "a"},
		{"x.b.example.com", "b"},
		{"other.b.example.com", "b"},
		{"b.example.com", "default"},     // a wildcard needs its label
		{"y.x.b.example.com", "default"}, // and matches exactly one
		{"c.example.com", "default"},
		{"", "default"}, // no server_name at all
	} {
		c, err := tlsDial(t, p.addr, tt.sni)
		if err != nil {
			t.Fatalf("TLS through the proxy with SNI %q: %v", tt.sni, err)
		}
		if got := readLine(t, c); got != tt.want {
			t.Errorf("SNI %q reached %q, want %q", tt.sni, got, tt.want)
		}
		roundTrip(t, c, "tls echo")
	}
}

func TestSNINoRouteWithoutDefaultIsClosed(t *testing.T) {
	a := tlsBackend(t, "a")
	p := startProxy(t, Config{Name: "t", SNI: []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "a"}}}, newUpstream(t, "a", rr(), a.addr))
	if _, err := tlsDial(t, p.addr, "b.example.com"); err == nil {
		t.Fatal("TLS handshake for an unrouted name succeeded, want the connection closed")
	}
	testutil.WaitFor(t, 5*time.Second, "rejected{sni}", func() bool { return p.rejected(RejectSNI) == 1 })
	c, err := tlsDial(t, p.addr, "a.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, c); got != "a" {
		t.Fatalf("routed to %q, want a", got)
	}
}

func TestSNIClientHelloTimeout(t *testing.T) {
	const timeout = 150 * time.Millisecond
	a := tlsBackend(t, "a")
	p := startProxy(t, Config{Name: "t", Upstream: "a", SNITimeout: timeout, SNI: []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "a"}}},
		newUpstream(t, "a", rr(), a.addr))
	silent := p.dial(t)
	if took := expectClosed(t, silent, 5*time.Second); took < timeout-10*time.Millisecond {
		t.Errorf("closed after %v, before sni_timeout %v", took, timeout)
	}
	half := p.dial(t)
	half.Write(captureHello(t, "a.example.com")[:20])
	expectClosed(t, half, 5*time.Second)
	testutil.WaitFor(t, 5*time.Second, "rejected{sni} = 2", func() bool { return p.rejected(RejectSNI) == 2 })
	if n := a.accepts(); n != 0 {
		t.Errorf("backend saw %d connections, want 0", n)
	}
}

func TestSNIGarbageIsClosedAtOnce(t *testing.T) {
	a := tlsBackend(t, "a")
	p := startProxy(t, Config{Name: "t", Upstream: "a", SNITimeout: 10 * time.Second, SNI: []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "a"}}},
		newUpstream(t, "a", rr(), a.addr))
	c := p.dial(t)
	c.Write([]byte("GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n"))
	if took := expectClosed(t, c, 5*time.Second); took > 2*time.Second {
		t.Errorf("plain HTTP on a TLS listener closed after %v, want at once", took)
	}
	testutil.WaitFor(t, 5*time.Second, "rejected{sni}", func() bool { return p.rejected(RejectSNI) == 1 })
}

// TestSNIForwardsHelloUnchanged: a ClientHello re-framed into two records
// and sent in two writes reaches the routed upstream byte for byte.
func TestSNIForwardsHelloUnchanged(t *testing.T) {
	in := reframe(captureHello(t, "a.example.com"), 100)
	if len(in) > 8*(100+5) {
		in = reframe(captureHello(t, "a.example.com"), 400)
	}
	got := make(chan []byte, 1)
	rec := startServer(t, recorder(len(in), got))
	other := startServer(t, echo)
	p := startProxy(t, Config{Name: "t", Upstream: "other", SNI: []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "a"}}},
		newUpstream(t, "a", rr(), rec.addr), newUpstream(t, "other", rr(), other.addr))
	c := p.dial(t)
	c.SetNoDelay(true)
	c.Write(in[:7])
	c.Write(in[7:])
	select {
	case b := <-got:
		if !bytes.Equal(b, in) {
			t.Fatalf("upstream received % x\nwant % x", b, in)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the routed upstream received nothing")
	}
	if other.accepts() != 0 {
		t.Error("the default upstream got the connection, want the routed one")
	}
}

// TestSNIAfterAcceptedProxyHeader: a trusted balancer's PROXY header comes
// first, then the ClientHello; routing and the TLS session work as usual,
// and the header's client address is the hash key.
func TestSNIAfterAcceptedProxyHeader(t *testing.T) {
	a, d := tlsBackend(t, "a"), tlsBackend(t, "default")
	ua := newUpstream(t, "a", rr(), a.addr)
	keys := make(chan string, 1)
	ua.onPick = func(info *balance.Info) { keys <- info.Key }
	p := startProxy(t, Config{Name: "t", Upstream: "d", SNI: []SNIRoute{{Names: []string{"a.example.com"}, Upstream: "a"}},
		AcceptProxyProtocol: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		ua, newUpstream(t, "d", rr(), d.addr))
	raw := p.dial(t)
	if _, err := raw.Write([]byte("PROXY TCP6 2001:db8::7 2001:db8::1 40000 443\r\n")); err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true})
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatalf("TLS after the PROXY header: %v", err)
	}
	if got := readLine(t, c); got != "a" {
		t.Fatalf("routed to %q, want a", got)
	}
	if k := <-keys; k != "2001:db8::7" {
		t.Errorf("hash key %q, want the PROXY header's source 2001:db8::7", k)
	}
}
