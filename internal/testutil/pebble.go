package testutil

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Pebble is a pebble process (Let's Encrypt's test ACME server) of a
// test's own, on free loopback ports. Its validation authority resolves
// every name to 127.0.0.1 through a DNS responder of the test's, and
// connects for http-01 to HTTPPort and for tls-alpn-01 to TLSPort.
type Pebble struct {
	// DirectoryURL is the ACME directory (https).
	DirectoryURL string
	// CAFile holds the certificate of pebble's own HTTPS endpoints, to
	// trust when talking to DirectoryURL.
	CAFile string
	// ManagementURL is pebble's management API (https), which hands out
	// the root of the certificates it issues at /roots/0.
	ManagementURL string

	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
}

// PebbleConfig says where pebble's validation authority connects.
type PebbleConfig struct {
	// HTTPPort and TLSPort are the loopback ports pebble connects to
	// for http-01 and tls-alpn-01 challenges.
	HTTPPort, TLSPort int
}

// StartPebble starts pebble for t with PEBBLE_VA_NOSLEEP=1 (challenges are
// validated at once, really: no PEBBLE_VA_ALWAYS_VALID). Without
// /usr/bin/pebble on PATH it skips t, except under CI=true, where it fails
// (scripts/test.sh installs the Debian package pebble). The process is
// killed when the test ends, or earlier by Stop.
func StartPebble(t testing.TB, pc PebbleConfig) *Pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("pebble is not on PATH and CI=true: this test needs a real ACME server (scripts/test.sh installs the Debian package pebble)")
		}
		t.Skip("pebble is not on PATH (apt-get install pebble); CI runs this test")
	}
	dnsAddr := startLoopbackDNS(t)
	dir := t.TempDir()
	certFile, keyFile := WriteKeyPair(t, dir, "pebble")
	var lastErr error
	for range 3 {
		p, err := tryStartPebble(t, bin, dir, certFile, keyFile, dnsAddr, pc)
		if err == nil {
			return p
		}
		lastErr = err // most likely a port was taken meanwhile
	}
	t.Fatalf("starting pebble: %v", lastErr)
	return nil
}

func tryStartPebble(t testing.TB, bin, dir, certFile, keyFile, dnsAddr string, pc PebbleConfig) (*Pebble, error) {
	listen, mgmt := FreeAddr(t), FreeAddr(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  listen,
		"managementListenAddress":        mgmt,
		"certificate":                    certFile,
		"privateKey":                     keyFile,
		"httpPort":                       pc.HTTPPort,
		"tlsPort":                        pc.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
	}}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "pebble-config.json")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", dnsAddr)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Pebble{
		DirectoryURL:  "https://" + listen + "/dir",
		CAFile:        certFile,
		ManagementURL: "https://" + mgmt,
		cmd:           cmd,
		exited:        make(chan struct{}),
	}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.Stop)
	client := p.client(t)
	// Ready when the directory answers. Polling is all a separate process
	// offers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(p.DirectoryURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("pebble on %s exited:\n%s", listen, out.String())
		default:
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("pebble's directory %s not answering after 20s:\n%s", p.DirectoryURL, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills pebble and waits for it to exit.
func (p *Pebble) Stop() {
	p.once.Do(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
}

// client is an HTTPS client that trusts pebble's own endpoints.
func (p *Pebble) client(t testing.TB) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// Roots returns a pool with the root of the certificates pebble issues
// (from its management API; pebble makes a new one each start).
func (p *Pebble) Roots(t testing.TB) *x509.CertPool {
	t.Helper()
	resp, err := p.client(t).Get(p.ManagementURL + "/roots/0")
	if err != nil {
		t.Fatalf("fetching pebble's root: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fetching pebble's root: %s %v", resp.Status, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(body) {
		t.Fatalf("pebble's /roots/0 is not a PEM certificate: %q", body)
	}
	return pool
}

// startLoopbackDNS serves DNS on a free loopback UDP port until t ends:
// every A question is answered 127.0.0.1, every other question has no
// answer (so pebble connects over IPv4 to the loopback).
func startLoopbackDNS(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		for _, qq := range q.Question {
			if qq.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
					A:   net.IPv4(127, 0, 0, 1),
				})
			}
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
	return pc.LocalAddr().String()
}

// PortOf returns the port of a host:port address.
func PortOf(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// lockedBuffer collects a process's output for an error message.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
