package consul

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/registry"
)

func webInstance() registry.Instance {
	return registry.Instance{
		ID: "web-1", Service: "web", Address: "10.1.10.100", Port: 8000,
		Tags: []string{"v2"}, Meta: map[string]string{"version": "2.3"}, Weight: 3, Zone: "eu-1",
	}
}

// registration decodes the body of a register request.
func registration(t *testing.T, s seen) map[string]any {
	t.Helper()
	if s.Method != "PUT" || s.Path != "/v1/agent/service/register" {
		t.Fatalf("request %s %s, want PUT /v1/agent/service/register", s.Method, s.Path)
	}
	if s.Query.Get("replace-existing-checks") != "true" {
		t.Fatalf("query %s: want replace-existing-checks=true", s.Query.Encode())
	}
	var body map[string]any
	if err := json.Unmarshal(s.Body, &body); err != nil {
		t.Fatalf("register body %s: %v", s.Body, err)
	}
	return body
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRegisterWithATTLCheck(t *testing.T) {
	rp := newReplay(t, step{})
	r := newTestRegistry(t, rp.srv.URL, func(c *Config) { c.Token = "secret" })
	in := webInstance()
	err := r.Register(nextCtx(t), registry.Registration{Instance: in, Check: registry.Check{TTL: 10 * time.Second, DeregisterCriticalAfter: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	req := rp.request(t)
	body := registration(t, req)
	if req.Header.Get("X-Consul-Token") != "secret" {
		t.Fatalf("token header %q", req.Header.Get("X-Consul-Token"))
	}
	for k, want := range map[string]string{
		"ID":      `"web-1"`,
		"Name":    `"web"`,
		"Tags":    `["v2"]`,
		"Address": `"10.1.10.100"`,
		"Port":    `8000`,
		"Meta":    `{"version":"2.3","zone":"eu-1"}`,
		"Weights": `{"Passing":3,"Warning":1}`,
		"Check":   `{"CheckID":"service:web-1","DeregisterCriticalServiceAfter":"1m0s","Name":"Service 'web' check","TTL":"10s"}`,
	} {
		if got := jsonOf(t, body[k]); got != want {
			t.Errorf("%s: %s, want %s", k, got, want)
		}
	}
	if in.Meta["zone"] != "" {
		t.Fatal("Register wrote the zone into the caller's Meta map")
	}
}

func TestRegisterWithHTTPAndTCPChecks(t *testing.T) {
	rp := newReplay(t, step{}, step{})
	r := newTestRegistry(t, rp.srv.URL, nil)
	in := webInstance()
	in.Weight, in.Zone, in.Meta = 0, "", nil
	if err := r.Register(nextCtx(t), registry.Registration{Instance: in, Check: registry.Check{HTTP: "http://10.1.10.100:8000/health", Timeout: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	body := registration(t, rp.request(t))
	if got := jsonOf(t, body["Check"]); got != `{"CheckID":"service:web-1","HTTP":"http://10.1.10.100:8000/health","Interval":"10s","Name":"Service 'web' check","Timeout":"2s"}` {
		t.Errorf("HTTP check %s", got)
	}
	if got := jsonOf(t, body["Weights"]); got != `{"Passing":1,"Warning":1}` {
		t.Errorf("weights of an unweighted instance %s, want Passing 1", got)
	}
	if _, ok := body["Meta"]; ok {
		t.Errorf("Meta %v sent for an instance with none", body["Meta"])
	}
	if err := r.Register(nextCtx(t), registry.Registration{Instance: in, Check: registry.Check{TCP: "10.1.10.100:8000", Interval: 5 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	body = registration(t, rp.request(t))
	if got := jsonOf(t, body["Check"]); got != `{"CheckID":"service:web-1","Interval":"5s","Name":"Service 'web' check","TCP":"10.1.10.100:8000"}` {
		t.Errorf("TCP check %s", got)
	}
}

func TestRegisterRejectsBadRegistrationsWithoutARequest(t *testing.T) {
	rp := newReplay(t)
	r := newTestRegistry(t, rp.srv.URL, nil)
	for _, tc := range []struct {
		name string
		mod  func(*registry.Registration)
		want string
	}{
		{"no port", func(r *registry.Registration) { r.Instance.Port = 0 }, "port"},
		{"no id", func(r *registry.Registration) { r.Instance.ID = "" }, "id"},
		{"slash in id", func(r *registry.Registration) { r.Instance.ID = "a/b" }, "id"},
		{"two checks", func(r *registry.Registration) { r.Check = registry.Check{TTL: time.Second, HTTP: "http://x/"} }, "exactly one"},
		{"bad http", func(r *registry.Registration) { r.Check = registry.Check{HTTP: "ftp://x/"} }, "check.http"},
		{"bad tcp", func(r *registry.Registration) { r.Check = registry.Check{TCP: "nohost"} }, "check.tcp"},
		{"negative ttl", func(r *registry.Registration) { r.Check = registry.Check{TTL: -time.Second} }, "check.ttl"},
		{"deregister without check", func(r *registry.Registration) { r.Check = registry.Check{DeregisterCriticalAfter: time.Minute} }, "deregister_critical_after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registry.Registration{Instance: webInstance(), Check: registry.Check{TTL: time.Second}}
			tc.mod(&reg)
			err := r.Register(context.Background(), reg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register: %v, want an error naming %q", err, tc.want)
			}
			rp.noRequest(t)
		})
	}
}

func TestRegisterReportsConsulsRefusal(t *testing.T) {
	rp := newReplay(t, step{status: 403, body: "Permission denied: token with AccessorID '00000000' lacks permission 'service:write' on \"web\""})
	r := newTestRegistry(t, rp.srv.URL, nil)
	err := r.Register(nextCtx(t), registry.Registration{Instance: webInstance()})
	if err == nil || !strings.Contains(err.Error(), `consul: register "web-1"`) || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("Register on a 403: %v", err)
	}
}

func TestHeartbeatPassesTheTTLCheck(t *testing.T) {
	rp := newReplay(t, step{})
	r := newTestRegistry(t, rp.srv.URL, nil)
	if err := r.Heartbeat(nextCtx(t), "web-1"); err != nil {
		t.Fatal(err)
	}
	req := rp.request(t)
	if req.Method != "PUT" || req.Path != "/v1/agent/check/update/service:web-1" {
		t.Fatalf("request %s %s, want PUT /v1/agent/check/update/service:web-1", req.Method, req.Path)
	}
	if strings.TrimSpace(string(req.Body)) != `{"Status":"passing","Output":""}` {
		t.Fatalf("body %s", req.Body)
	}
}

func TestHeartbeatOfAnUnknownCheckIsErrNotRegistered(t *testing.T) {
	for _, tc := range []struct {
		name    string
		s       step
		unknown bool
	}{
		{"404", step{status: 404, body: `Unknown check ID "service:web-1"`}, true},
		{"500 no TTL", step{status: 500, body: `CheckID "service:web-1" does not have associated TTL`}, true},
		{"500 unknown check", step{status: 500, body: `Unknown check "service:web-1"`}, true},
		{"500 other", step{status: 500, body: "rpc error: No cluster leader"}, false},
		{"403", step{status: 403, body: "Permission denied"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := newReplay(t, tc.s)
			r := newTestRegistry(t, rp.srv.URL, nil)
			err := r.Heartbeat(nextCtx(t), "web-1")
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, registry.ErrNotRegistered) != tc.unknown {
				t.Fatalf("Heartbeat: %v; ErrNotRegistered: %v, want %v", err, !tc.unknown, tc.unknown)
			}
			if !strings.Contains(err.Error(), tc.s.body) {
				t.Fatalf("Heartbeat: %v; want Consul's message %q", err, tc.s.body)
			}
		})
	}
}

func TestDeregister(t *testing.T) {
	rp := newReplay(t, step{}, step{status: 404, body: `Unknown service ID "web-9"`}, step{status: 500, body: "boom"})
	r := newTestRegistry(t, rp.srv.URL, nil)
	if err := r.Deregister(nextCtx(t), "web-1"); err != nil {
		t.Fatal(err)
	}
	if req := rp.request(t); req.Method != "PUT" || req.Path != "/v1/agent/service/deregister/web-1" {
		t.Fatalf("request %s %s", req.Method, req.Path)
	}
	if err := r.Deregister(nextCtx(t), "web-9"); err != nil {
		t.Fatalf("deregistering an unknown ID: %v, want nil", err)
	}
	if err := r.Deregister(nextCtx(t), "web-1"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Deregister on a 500: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Address: "ftp://x:1"}, "address"},
		{Config{Address: "nohost"}, "address"},
		{Config{Address: "http://x:1", Scheme: "https"}, "scheme"},
		{Config{Scheme: "gopher"}, "scheme"},
		{Config{Scheme: "http", TLS: &TLS{}}, "tls"},
		{Config{TLS: &TLS{CertFile: "c.pem"}}, "key_file"},
		{Config{WaitTime: 11 * time.Minute}, "wait_time"},
		{Config{WaitTime: -1}, "wait_time"},
		{Config{RequestTimeout: -1}, "request_timeout"},
		{Config{MaxResponseBytes: -1}, "max_response_bytes"},
		{Config{ChurnInterval: -1}, "churn_interval"},
		{Config{TLS: &TLS{CAFile: "/nonexistent/ca.pem"}}, "tls"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Address != DefaultAddress || r.cfg.Scheme != "http" || r.cfg.WaitTime != DefaultWaitTime || r.cfg.ChurnInterval != DefaultChurnInterval {
		t.Fatalf("defaults %+v", r.cfg)
	}
	r, err = New(Config{Address: "https://consul.example:8501"})
	if err != nil || r.cfg.Scheme != "https" || r.cfg.Address != "consul.example:8501" {
		t.Fatalf("https address: %+v, %v", r.cfg, err)
	}
}
