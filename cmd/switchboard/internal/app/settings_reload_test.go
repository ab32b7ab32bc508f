package app_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/app"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// listenerSettings are the listener keys the reloads below change.
type listenerSettings struct {
	readHeader, idle, maxHeader string
}

// settingsConfig renders a cleartext and a TLS listener, both with s, in
// front of upstream.
func settingsConfig(plain, secure, cert, key, upstream string, s listenerSettings) string {
	var b strings.Builder
	fmt.Fprintf(&b, "admin: {enabled: false}\nlog: {level: error}\nlisteners:\n")
	for _, l := range []struct{ name, listen, tls string }{
		{"plain", plain, ""},
		{"secure", secure, fmt.Sprintf("    tls: {cert_file: %s, key_file: %s}\n", cert, key)},
	} {
		fmt.Fprintf(&b, "  - name: %s\n    listen: %s\n%s", l.name, l.listen, l.tls)
		fmt.Fprintf(&b, "    timeouts: {read_header: %s, idle: %s}\n    max_header_bytes: %s\n", s.readHeader, s.idle, s.maxHeader)
		b.WriteString("    routes: [{upstream: u}]\n")
	}
	fmt.Fprintf(&b, "upstreams:\n  u: {targets: [{address: %s}]}\n", upstream)
	return b.String()
}

// loadClient sends GETs and POSTs (whose bodies cannot be replayed, so
// that net/http cannot hide a broken connection by sending them again)
// over one keep-alive connection at a time, counting the connections it
// had to open.
type loadClient struct {
	c     *http.Client
	url   string
	dials atomic.Int64
}

func newLoadClient(url string, h2 bool) *loadClient {
	lc := &loadClient{url: url}
	d := &net.Dialer{}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 1,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2:   h2,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			lc.dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 over TLS
	}
	lc.c = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return lc
}

// do sends request i: a GET, or a POST of a body it reports back.
func (lc *loadClient) do(i int) error {
	var req *http.Request
	want := "ok 0"
	if i%2 == 0 {
		req, _ = http.NewRequest("GET", lc.url, nil)
	} else {
		body := strings.Repeat("x", 100+i%1000)
		// A reader net/http does not know: no GetBody, so no replay.
		req, _ = http.NewRequest("POST", lc.url, io.MultiReader(strings.NewReader(body)))
		want = fmt.Sprintf("ok %d", len(body))
	}
	resp, err := lc.c.Do(req)
	if err != nil {
		return err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(got) != want {
		return fmt.Errorf("%s: %d %q, %v; want 200 %q", req.Method, resp.StatusCode, got, err, want)
	}
	return nil
}

// Issue 16, bug 3: a reload that changed a listener's server settings
// (timeouts, max_header_bytes) started a new server and shut the old one
// down, which closed every idle keep-alive connection: clients saw
// disconnects, and POSTs sent on a connection as it closed failed without
// reaching a backend. The HTTP/1 engine now takes new settings in place,
// on cleartext and TLS listeners alike; a TLS listener's HTTP/2
// connections stay on the net/http server they began on, which takes no
// new ones, until they close by themselves.
func TestReloadOfListenerSettingsDropsNoConnection(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "ok %d", n)
	}))
	defer up.Close()
	plain, secure := freeAddr(t), freeAddr(t)
	cert, key := testutil.WriteKeyPair(t, t.TempDir(), "server")
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	settings := []listenerSettings{
		{"10s", "60s", "64KiB"},
		{"5s", "60s", "64KiB"},  // read_header
		{"5s", "45s", "64KiB"},  // idle
		{"5s", "45s", "32KiB"},  // max_header_bytes
		{"7s", "50s", "16KiB"},  // all three
		{"10s", "60s", "64KiB"}, // and back
		{"3s", "30s", "8KiB"},   // the last: 8 KiB of header
	}
	render := func(s listenerSettings) string {
		return settingsConfig(plain, secure, cert, key, hostport(up), s)
	}
	writeFile(t, path, render(settings[0]))
	a, err := app.New(path, app.Options{Stderr: logOnFailure(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()

	// Idle keep-alive connections, opened before the reloads: cleartext,
	// and HTTP/1.1 over TLS.
	plainConn, err := net.Dial("tcp", plain)
	if err != nil {
		t.Fatal(err)
	}
	defer plainConn.Close()
	tlsConn, err := tls.Dial("tcp", secure, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tlsConn.Close()
	idle := []*rawConn{{name: "cleartext", c: plainConn, br: bufio.NewReader(plainConn)}, {name: "TLS", c: tlsConn, br: bufio.NewReader(tlsConn)}}
	for _, rc := range idle {
		if code, err := rc.get(""); err != nil || code != 200 {
			t.Fatalf("raw %s connection before the reloads: %d, %v", rc.name, code, err)
		}
	}

	clients := []*loadClient{
		newLoadClient("http://"+plain+"/", false),
		newLoadClient("http://"+plain+"/", false),
		newLoadClient("https://"+secure+"/", false),
		newLoadClient("https://"+secure+"/", true),
	}
	var stop atomic.Bool
	var failures, ok atomic.Int64
	var firstErr atomic.Value
	progress := make([]chan struct{}, len(clients))
	var wg sync.WaitGroup
	for i, lc := range clients {
		progress[i] = make(chan struct{}, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				if err := lc.do(n); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("client %d: %v", i, err))
				} else {
					ok.Add(1)
				}
				select {
				case progress[i] <- struct{}{}:
				default:
				}
			}
		}()
	}
	// waitAll waits until every client has finished some requests since
	// it was called.
	waitAll := func() {
		t.Helper()
		for i := range progress {
			for range 5 {
				select {
				case <-progress[i]:
				case <-time.After(20 * time.Second):
					t.Fatalf("client %d made no progress", i)
				}
			}
		}
	}
	for _, s := range settings[1:] {
		waitAll()
		writeFile(t, path, render(s))
		if err := a.Reload(); err != nil {
			t.Fatalf("reload to %+v: %v", s, err)
		}
	}
	waitAll()
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Errorf("%d of %d requests failed across %d reloads; first: %v", n, n+ok.Load(), len(settings)-1, firstErr.Load())
	}
	for i, lc := range clients {
		if n := lc.dials.Load(); n != 1 {
			t.Errorf("client %d (%s) opened %d connections; want 1: reloads must not close keep-alive connections", i, lc.url, n)
		}
	}

	// The idle connections are still open, and their requests see the
	// new settings: 16 KiB of header is now too much.
	for _, rc := range idle {
		if code, err := rc.get(""); err != nil || code != 200 {
			t.Fatalf("the idle %s keep-alive connection opened before the reloads: %d, %v; want it still usable", rc.name, code, err)
		}
		if code, err := rc.get("X-Big: " + strings.Repeat("b", 16<<10) + "\r\n"); err != nil || code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("%s: 16 KiB header after max_header_bytes became 8KiB: %d, %v; want 431 (new settings reach live connections)", rc.name, code, err)
		}
	}
	t.Logf("%d requests across %d reloads; connections opened: %d %d %d %d", ok.Load(), len(settings)-1,
		clients[0].dials.Load(), clients[1].dials.Load(), clients[2].dials.Load(), clients[3].dials.Load())
}

// rawConn is a keep-alive connection a test writes requests to by hand.
type rawConn struct {
	name string
	c    net.Conn
	br   *bufio.Reader
}

// get sends a GET with the extra header lines and returns the status.
func (rc *rawConn) get(extra string) (int, error) {
	rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(rc.c, "GET /raw HTTP/1.1\r\nHost: x\r\n"+extra+"\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
