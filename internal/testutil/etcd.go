package testutil

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EtcdBinary is where Debian's etcd-server package installs etcd.
const EtcdBinary = "/usr/bin/etcd"

// EtcdServer is a single-member etcd of a test's own: loopback client and
// peer ports, a data directory under t.TempDir(). It can be stopped,
// killed, wiped and restarted on the same ports; it is killed when the test
// ends.
type EtcdServer struct {
	bin     string
	dataDir string
	client  string // 127.0.0.1:port
	peer    string
	token   string

	mu   sync.Mutex
	proc *etcdProc // nil while stopped
}

type etcdProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *limitedBuffer
}

// StartEtcd starts an etcd for t and waits until it reports healthy.
// Without /usr/bin/etcd it skips t, except under CI=true, where tests that
// need etcd must run (scripts/test.sh installs the Debian package
// etcd-server).
//
// The member runs with a 50ms heartbeat and a 500ms election timeout, so
// that its minimum lease TTL is 1s (etcd's default timings raise a 1s lease
// to 2s; etcd issue #14857) and a restarted member elects itself quickly.
func StartEtcd(t testing.TB) *EtcdServer {
	t.Helper()
	bin := EtcdBinary
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing and CI=true: this test needs a real etcd (scripts/test.sh installs the Debian package etcd-server)", bin)
		}
		t.Skipf("%s is missing (apt-get install etcd-server); CI runs this test", bin)
	}
	s := &EtcdServer{
		bin:     bin,
		dataDir: filepath.Join(t.TempDir(), "etcd"),
		token:   fmt.Sprintf("switchboard-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
	}
	t.Cleanup(s.Kill)
	var lastErr error
	for range 3 {
		s.client, s.peer = FreeAddr(t), FreeAddr(t)
		if lastErr = s.start(); lastErr == nil {
			return s
		}
		// Most likely a port was taken between FreeAddr and etcd's bind.
	}
	t.Fatalf("starting etcd: %v", lastErr)
	return nil
}

// Addr is the client address, host:port, for clientv3.Config.Endpoints.
func (s *EtcdServer) Addr() string { return s.client }

// URL is the client URL, http://host:port.
func (s *EtcdServer) URL() string { return "http://" + s.client }

// DataDir is the member's data directory.
func (s *EtcdServer) DataDir() string { return s.dataDir }

// takeProc detaches the running etcd process, or returns nil.
func (s *EtcdServer) takeProc() *etcdProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	return p
}

// Stop sends SIGTERM and waits for etcd to exit (SIGKILL after 10s).
func (s *EtcdServer) Stop() {
	p := s.takeProc()
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// Kill sends SIGKILL and waits for etcd to exit. It is a no-op when etcd
// is not running.
func (s *EtcdServer) Kill() {
	p := s.takeProc()
	if p == nil {
		return
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// Wipe deletes the data directory of a stopped server, so that the next
// Restart starts an empty etcd: every key, lease and revision is gone.
func (s *EtcdServer) Wipe(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	running := s.proc != nil
	s.mu.Unlock()
	if running {
		t.Fatal("testutil: Wipe needs a stopped etcd (call Stop or Kill first)")
	}
	if err := os.RemoveAll(s.dataDir); err != nil {
		t.Fatalf("wiping etcd data dir: %v", err)
	}
}

// Restart starts the stopped server again with the same data directory and
// ports and waits until it is healthy. A port taken meanwhile by another
// process fails the test after a few attempts.
func (s *EtcdServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for range 5 {
		if err = s.start(); err == nil {
			return
		}
		// The old process's sockets are closed when it has exited; a
		// failure here is someone else on our port. Give it a moment.
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("restarting etcd: %v", err)
}

func (s *EtcdServer) start() error {
	clientURL, peerURL := "http://"+s.client, "http://"+s.peer
	cmd := exec.Command(s.bin,
		"--name", "test",
		"--data-dir", s.dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "test="+peerURL,
		"--initial-cluster-token", s.token,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--logger", "zap",
		"--log-level", "warn",
		"--log-outputs", "stderr",
	)
	logBuf := &limitedBuffer{max: 64 << 10}
	cmd.Stdout = logBuf
	cmd.Stderr = logBuf
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &etcdProc{cmd: cmd, exited: make(chan struct{}), log: logBuf}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	if err := waitHealthy(s.client, p.exited, 15*time.Second); err != nil {
		cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("etcd on %s: %w\n%s", s.client, err, logBuf.String())
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// waitHealthy polls /health until etcd has a leader and answers
// {"health":"true"}. Polling is all a separate process offers.
func waitHealthy(addr string, exited <-chan struct{}, limit time.Duration) error {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(limit)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if strings.Contains(string(body), `"health":"true"`) {
				cancel()
				return nil
			}
			err = fmt.Errorf("/health answered %q", body)
		}
		cancel()
		last = err
		select {
		case <-exited:
			return fmt.Errorf("exited before becoming healthy (last probe: %v)", last)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %v: %v", limit, last)
		}
	}
}

// Log returns what the running (or last) etcd process wrote, up to 64 KiB.
func (s *EtcdServer) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ""
	}
	return s.proc.log.String()
}

// Running reports whether the server process is up.
func (s *EtcdServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// limitedBuffer keeps the first max bytes written to it and drops the rest.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
