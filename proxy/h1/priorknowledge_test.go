package h1

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// TestPriorKnowledgeHandsOverHTTP2Connections: a connection that opens
// with HTTP/2's preface goes to the SetPriorKnowledge function with every
// byte the client sent, in order, and is no longer the server's; HTTP/1
// requests beside it, POST and PRI-looking ones included, are served as
// before; with the function unset the preface gets 505.
func TestPriorKnowledgeHandsOverHTTP2Connections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: okHandler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 1 << 16, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got := make(chan net.Conn, 1)
	s.SetPriorKnowledge(func(c net.Conn) { got <- c })
	go s.Serve(ln)
	defer s.Close()
	addr := ln.Addr().String()

	const frames = "\x00\x00\x00\x04\x00\x00\x00\x00\x00" // an empty SETTINGS frame
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The preface in two writes: the test must wait for the rest.
	io.WriteString(c, http2Preface[:5])
	time.AfterFunc(50*time.Millisecond, func() { io.WriteString(c, http2Preface[5:]+frames) })
	var h2 net.Conn
	select {
	case h2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the HTTP/2 connection was not handed over")
	}
	defer h2.Close()
	h2.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, len(http2Preface)+len(frames))
	if _, err := io.ReadFull(h2, buf); err != nil || string(buf) != http2Preface+frames {
		t.Fatalf("handed-over connection reads %q, %v; want the preface and the frame after it", buf, err)
	}
	// The server let go of it: writing on it reaches the client, and
	// Close of the server does not close it.
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("the server still tracks %d connections after the hand-over", n)
	}
	io.WriteString(h2, "hello")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b := make([]byte, 5); func() bool { _, err := io.ReadFull(c, b); return err != nil || string(b) != "hello" }() {
		t.Fatal("the client did not get what the new owner wrote")
	}

	for _, raw := range []string{
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
		"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
		"PRIX / HTTP/1.1\r\nHost: a\r\n\r\n",
	} {
		if resp := exchange(t, addr, raw); !strings.HasPrefix(resp, "HTTP/1.1 200 ") {
			t.Errorf("%q with prior knowledge on: got %q, want 200", raw, resp)
		}
	}
	select {
	case c := <-got:
		c.Close()
		t.Fatal("an HTTP/1 connection was handed over")
	default:
	}

	s.SetPriorKnowledge(nil)
	if resp := exchange(t, addr, http2Preface); !strings.HasPrefix(resp, "HTTP/1.1 505 ") {
		t.Errorf("preface with prior knowledge off: got %q, want 505", resp)
	}
}
