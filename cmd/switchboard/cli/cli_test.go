package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/cmd/switchboard/cli"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/internal/testutil"
)

// lastReady sends every request to the last ready endpoint: a policy no
// built-in one imitates, so that traffic shows it is in charge.
type lastReady struct{ set atomic.Pointer[endpoint.Set] }

func (l *lastReady) Update(s *endpoint.Set) { l.set.Store(s) }

func (l *lastReady) Pick(*balance.Info) (balance.Result, error) {
	s := l.set.Load()
	if s == nil || len(s.Ready) == 0 {
		return balance.Result{}, balance.ErrNoEndpoint
	}
	ep := s.Ready[len(s.Ready)-1]
	ep.Acquire()
	return balance.Result{Endpoint: ep, Done: ep.DoneFunc()}, nil
}

// As a program of one's own does before it calls cli.Main.
func init() {
	balance.Register("last_ready", func(cfg balance.Config) (balance.Balancer, error) {
		if err := cfg.Unused(); err != nil {
			return nil, err
		}
		return &lastReady{}, nil
	})
}

// syncBuffer is a bytes.Buffer the serving goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeRoutesWithARegisteredPolicy: a policy registered before
// cli.Run is accepted by the configuration and is the one that routes the
// proxy's traffic, over real sockets; canceling the context stops serve
// with status 0.
func TestServeRoutesWithARegisteredPolicy(t *testing.T) {
	var hits [2]atomic.Int64
	backends := make([]string, 2)
	for i := range backends {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			fmt.Fprintf(w, "backend %d", i)
		}))
		defer srv.Close()
		backends[i] = srv.Listener.Addr().String()
	}
	admin, listen := testutil.FreeAddr(t), testutil.FreeAddr(t)
	path := writeConfig(t, fmt.Sprintf(`admin:
  listen: %s
listeners:
  - name: web
    protocol: http
    listen: %s
    routes:
      - match: {path_prefix: /}
        upstream: orders
upstreams:
  orders:
    balance: {policy: last_ready}
    targets:
      - {address: %s}
      - {address: %s}
`, admin, listen, backends[0], backends[1]))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- cli.Run(ctx, []string{"serve", "--config", path}, io.Discard, &stderr) }()

	testutil.WaitFor(t, 20*time.Second, "the proxy to be ready", func() bool {
		select {
		case code := <-exited:
			t.Fatalf("serve exited with %d before it was ready:\n%s", code, stderr.String())
		default:
		}
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for i := range 20 {
		resp, err := http.Get("http://" + listen + "/orders/" + fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "backend 1" {
			t.Fatalf("request %d: %d %q, want 200 from backend 1 (the last ready)", i, resp.StatusCode, body)
		}
	}
	if a, b := hits[0].Load(), hits[1].Load(); a != 0 || b != 20 {
		t.Fatalf("backends saw %d and %d requests, want 0 and 20", a, b)
	}

	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("serve exited with %d after cancel, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not return within 20s of cancel")
	}
}

// TestValidateKnowsRegisteredPolicies: validate accepts the registered
// name, lists it among the known ones for a wrong name, and rejects a key
// the policy does not read.
func TestValidateKnowsRegisteredPolicies(t *testing.T) {
	base := "listeners:\n  - name: web\n    listen: 127.0.0.1:0\n    routes: [{match: {path_prefix: /}, upstream: u}]\nupstreams:\n  u:\n    targets: [{address: 'a:1'}]\n"
	for _, tc := range []struct {
		balance string
		code    int
		out     string
	}{
		{"    balance: {policy: last_ready}\n", 0, ": ok"},
		{"    balance: {policy: lastready}\n", 1, `"lastready" is unknown (known: consistent_hash, dynamic_weight, last_ready, least_conn,`},
		{"    balance: {policy: last_ready, slow_start: 5s}\n", 1, "slow_start: not used by last_ready"},
	} {
		path := writeConfig(t, base+tc.balance)
		var out, errb bytes.Buffer
		code := cli.Run(context.Background(), []string{"validate", "--config", path}, &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("validate with %q: %d %q %q, want %d and %q", tc.balance, code, out.String(), errb.String(), tc.code, tc.out)
		}
	}
}
