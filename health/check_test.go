package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func serverAddr(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func checkCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestHTTPCheckJudgesStatus(t *testing.T) {
	tests := []struct {
		status int
		expect string
		pass   bool
	}{
		{200, "", true},
		{204, "", true},
		{302, "", true},
		{404, "", false},
		{500, "", false},
		{500, "200-399,500", true},
		{204, "200", false},
	}
	for _, tt := range tests {
		addr := serverAddr(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tt.status) })
		h := &HTTPCheck{Path: "/healthz"}
		if tt.expect != "" {
			h.Expect = mustParseStatusRanges(tt.expect)
		}
		err := h.Check(checkCtx(t), addr)
		if (err == nil) != tt.pass {
			t.Errorf("status %d, expect %q: err = %v, want pass=%v", tt.status, tt.expect, err, tt.pass)
		}
		if !tt.pass && err != nil && !strings.Contains(err.Error(), "status ") {
			t.Errorf("status %d: error %q does not name the status", tt.status, err)
		}
	}
}

func TestHTTPCheckBodySubstring(t *testing.T) {
	addr := serverAddr(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"ok"}`)) })
	if err := (&HTTPCheck{Body: `"ok"`}).Check(checkCtx(t), addr); err != nil {
		t.Errorf("body contains the substring, check failed: %v", err)
	}
	if err := (&HTTPCheck{Body: `"degraded"`}).Check(checkCtx(t), addr); err == nil {
		t.Error("body lacks the substring, check passed")
	}
}

func TestHTTPCheckReadsAtMostMaxBodyRead(t *testing.T) {
	addr := serverAddr(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", MaxBodyRead) + "ok"))
	})
	if err := (&HTTPCheck{Body: "ok"}).Check(checkCtx(t), addr); err == nil {
		t.Errorf("substring beyond the first %d bytes was found: the read is not capped", MaxBodyRead)
	}
}

func TestHTTPCheckSendsMethodPathAndHost(t *testing.T) {
	got := make(chan string, 1)
	addr := serverAddr(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.RequestURI() + " " + r.Host
	})
	h := &HTTPCheck{Method: "HEAD", Path: "/healthz?deep=1", Host: "orders.internal"}
	if err := h.Check(checkCtx(t), addr); err != nil {
		t.Fatal(err)
	}
	if want := "HEAD /healthz?deep=1 orders.internal"; <-got != want {
		t.Errorf("request line and Host differ, want %q", want)
	}
}

func TestHTTPCheckDoesNotFollowRedirects(t *testing.T) {
	var followed atomic.Int32
	addr := serverAddr(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Add(1)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	err := (&HTTPCheck{Expect: mustParseStatusRanges("200")}).Check(checkCtx(t), addr)
	if err == nil || !strings.Contains(err.Error(), "status 302") {
		t.Errorf("err = %v, want the 302 judged as is", err)
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("redirect followed %d times", n)
	}
}

func TestHTTPCheckFailsOnRefusedConnection(t *testing.T) {
	if err := (&HTTPCheck{}).Check(checkCtx(t), closedAddr(t)); err == nil {
		t.Error("check of a closed port passed")
	}
}

func TestTCPCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := (TCPCheck{}).Check(checkCtx(t), ln.Addr().String()); err != nil {
		t.Errorf("listening port: %v", err)
	}
	if err := (TCPCheck{}).Check(checkCtx(t), closedAddr(t)); err == nil {
		t.Error("closed port passed")
	}
}

// closedAddr returns a loopback address that nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestParseStatusRanges(t *testing.T) {
	rs, err := ParseStatusRanges(" 200-299, 304 ,400-404")
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.String(); got != "200-299,304,400-404" {
		t.Errorf("String() = %q", got)
	}
	for code, want := range map[int]bool{199: false, 200: true, 299: true, 300: false, 304: true, 404: true, 405: false} {
		if rs.Contains(code) != want {
			t.Errorf("Contains(%d) = %v, want %v", code, !want, want)
		}
	}
	for _, bad := range []string{"", "abc", "300-200", "99", "200-600", "2xx"} {
		if _, err := ParseStatusRanges(bad); err == nil {
			t.Errorf("ParseStatusRanges(%q) succeeded, want an error", bad)
		}
	}
}
