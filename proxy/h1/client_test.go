package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawEndpoint answers every request with answer, one request a connection.
func rawEndpoint(t *testing.T, answer string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.WriteString(c, answer)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestClientTellsAnOversizedHeadFromAMalformedOne: only a head that runs
// past MaxResponseHeaderBytes is ErrResponseHeaderTooLarge; a malformed
// head within it is not, even when the read that brought it (with body
// bytes behind it) used the whole allowance.
func TestClientTellsAnOversizedHeadFromAMalformedOne(t *testing.T) {
	c := NewClient(ClientConfig{MaxResponseHeaderBytes: 1024})
	defer c.Close()
	do := func(answer string) error {
		req, _ := http.NewRequest("GET", "http://a/", nil)
		resp, err := c.Do(context.Background(), time.Now().Add(5*time.Second), rawEndpoint(t, answer), Request{Req: req, URI: "/", Host: "a", Header: http.Header{}})
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do("HTTP/1.1 200 OK\r\nX-Pad: " + strings.Repeat("p", 2048) + "\r\nContent-Length: 0\r\n\r\n"); !errors.Is(err, ErrResponseHeaderTooLarge) {
		t.Fatalf("a 2 KiB head under a 1 KiB cap: %v, want ErrResponseHeaderTooLarge", err)
	}
	err := do("HTTP/1.1 200 OK\r\nBad Line\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("b", 5000))
	if err == nil || errors.Is(err, ErrResponseHeaderTooLarge) {
		t.Fatalf("a short malformed head with a long body: %v, want a parse error", err)
	}
}
