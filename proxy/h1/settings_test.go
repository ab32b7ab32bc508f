package h1

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSetSettingsReachesALiveConnection: new limits apply to the next
// request of a keep-alive connection that was open (and idle) when they
// changed, without closing it.
func TestSetSettingsReachesALiveConnection(t *testing.T) {
	s := &Server{Handler: okHandler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(header string) int {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n"+header+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the connection did not answer: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	big := "X-Big: " + strings.Repeat("b", 16<<10) + "\r\n"
	if code := send(big); code != 200 {
		t.Fatalf("16 KiB of header under a 64 KiB limit: %d", code)
	}
	// The connection now waits for its next request.
	s.SetSettings(Settings{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 200 * time.Millisecond, MaxHeaderBytes: 4 << 10})
	if code := send(""); code != 200 {
		t.Fatalf("the connection's next request after SetSettings: %d", code)
	}
	if code := send(big); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("16 KiB of header after the limit became 4 KiB: %d, want 431", code)
	}

	// The new idle timeout applies from the connection's next wait.
	c2, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br2 := bufio.NewReader(c2)
	resp, err := http.ReadResponse(br2, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br2.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want EOF after the 200ms idle timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("idle connection closed after %v, want about 200ms", d)
	}
}
