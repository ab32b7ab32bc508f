// Package testutil holds helpers that tests in several packages share:
// free loopback addresses, throwaway TLS certificates and a Redis server.
package testutil

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// WaitFor polls cond every 2 ms until it holds, failing t after timeout
// with what it was waiting for. For state that has no event to wait on
// (a gauge, a counter); prefer a channel when there is one.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for configurations that must name a port before anything binds it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ServeTCP accepts loopback connections until the test ends and hands
// each to serve on a goroutine of its own, closing it when serve returns;
// it returns the address.
func ServeTCP(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// DeadAddr returns a loopback address where nothing listens and nothing
// will while the test runs: a TCP socket is bound to it but never
// listens, so a connect is refused, and no other test or process on the
// machine can take the port meanwhile (FreeAddr's port can be taken by the
// next listener anywhere, which turns a "dead" endpoint live).
func DeadAddr(t testing.TB) string {
	t.Helper()
	// Under ForkLock, as the net package does: a process started by
	// another test meanwhile inherits no descriptor.
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// WriteKeyPair writes a fresh self-signed certificate for localhost and
// 127.0.0.1, and its key, to dir as NAME.crt and NAME.key.
func WriteKeyPair(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// RedisServer is a redis-server process of a test's own, on a free loopback
// port, with no persistence. It is killed when the test ends.
type RedisServer struct {
	Addr string
	Cmd  *exec.Cmd
}

// StartRedis starts a redis-server for t. Without redis-server on PATH it
// skips t, except under CI=true, where tests that need Redis must run
// (scripts/test.sh installs the Debian package redis-server).
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not on PATH and CI=true: this test needs a real Redis (scripts/test.sh installs the Debian package redis-server)")
		}
		t.Skip("redis-server is not on PATH (apt-get install redis-server); CI runs this test")
	}
	var lastErr error
	for range 3 {
		s, err := tryStartRedis(t, bin)
		if err == nil {
			return s
		}
		lastErr = err // most likely the port was taken meanwhile
	}
	t.Fatalf("starting redis-server: %v", lastErr)
	return nil
}

func tryStartRedis(t testing.TB, bin string) (*RedisServer, error) {
	addr := FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() // SIGKILL also ends a SIGSTOPped server
		<-exited
	})
	// Ready when it answers PING. Polling is all a separate process offers.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(addr) == nil {
			return &RedisServer{Addr: addr, Cmd: cmd}, nil
		}
		select {
		case <-exited:
			logMu.Lock()
			defer logMu.Unlock()
			return nil, fmt.Errorf("redis-server on %s exited:\n%s", addr, log.String())
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redis-server on %s not answering PING after 10s", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Signal sends sig to the server (SIGSTOP freezes it, SIGKILL ends it).
func (s *RedisServer) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := s.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to redis-server: %v", sig, err)
	}
}
