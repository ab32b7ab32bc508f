package h1

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// A ClientConfig.Dial opens the connections, under the connect timeout,
// and its failure is a *ConnectError: nothing was sent.
func TestClientDialHook(t *testing.T) {
	refused := errors.New("refused by the dial hook")
	var left time.Duration
	c := NewClient(ClientConfig{ConnectTimeout: 300 * time.Millisecond, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		d, ok := ctx.Deadline()
		if !ok {
			t.Error("the dial's context has no deadline")
		}
		left = time.Until(d)
		return nil, refused
	}})
	defer c.Close()
	req, _ := http.NewRequest("GET", "http://a/", nil)
	_, err := c.Do(context.Background(), time.Now().Add(time.Minute), "a:1", Request{Req: req, URI: "/", Host: "a", Header: http.Header{}})
	var ce *ConnectError
	if !errors.As(err, &ce) || !errors.Is(err, refused) {
		t.Fatalf("Do: %v; want a *ConnectError wrapping the dial's error", err)
	}
	if left <= 0 || left > 300*time.Millisecond {
		t.Fatalf("the dial had %v left; want the connect timeout (300ms) at most", left)
	}

	// A hook that dials for real: its connection carries the exchange.
	ans := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	addr := rawEndpoint(t, ans)
	dialed := 0
	c2 := NewClient(ClientConfig{ConnectTimeout: time.Second, MaxIdlePerEndpoint: 4, Dial: func(ctx context.Context, a string) (net.Conn, error) {
		dialed++
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a)
	}})
	defer c2.Close()
	resp, err := c2.Do(context.Background(), time.Now().Add(5*time.Second), addr, Request{Req: req, URI: "/", Host: "a", Header: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || dialed != 1 {
		t.Fatalf("status %d after %d dials; want 200 after 1", resp.StatusCode, dialed)
	}
}
