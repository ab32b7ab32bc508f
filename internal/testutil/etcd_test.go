package testutil

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func etcdGet(t *testing.T, url string) (string, error) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return string(b), err
}

func TestEtcdStartsStopsRestartsOnTheSamePorts(t *testing.T) {
	s := StartEtcd(t)
	body, err := etcdGet(t, s.URL()+"/version")
	if err != nil || !strings.Contains(body, `"etcdserver":"3.`) {
		t.Fatalf("GET /version = %q, %v; want an etcd 3.x version", body, err)
	}
	addr := s.Addr()

	s.Stop()
	if s.Running() {
		t.Fatal("Running() = true after Stop")
	}
	if _, err := etcdGet(t, s.URL()+"/health"); err == nil {
		t.Fatal("etcd still answers after Stop")
	}

	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("Restart moved the client address from %s to %s", addr, s.Addr())
	}
	if body, err := etcdGet(t, s.URL()+"/health"); err != nil || !strings.Contains(body, `"health":"true"`) {
		t.Fatalf("after Restart GET /health = %q, %v", body, err)
	}

	s.Kill()
	s.Wipe(t)
	s.Restart(t)
	if body, err := etcdGet(t, s.URL()+"/health"); err != nil || !strings.Contains(body, `"health":"true"`) {
		t.Fatalf("after Wipe+Restart GET /health = %q, %v", body, err)
	}
}
