package h1loop

import (
	"bufio"
	"bytes"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
)

// TestChunkScannerFindsTheEndAtEverySplit feeds chunked bodies to the
// scanner cut at every byte and checks it stops exactly after the body
// (the bytes after it are the next response's), and that net/http's
// chunked reader reads the same body from the bytes it let through.
func TestChunkScannerFindsTheEndAtEverySplit(t *testing.T) {
	var enc bytes.Buffer
	w := httputil.NewChunkedWriter(&enc)
	io.WriteString(w, "hello ")
	io.WriteString(w, strings.Repeat("x", 300))
	w.Close()
	bodies := []string{
		enc.String() + "\r\n",
		"5;ext=1\r\nhello\r\n0\r\nX-Sum: 5\r\n\r\n",
	}
	const next = "HTTP/1.1 200 OK\r\n"
	for _, body := range bodies {
		in := body + next
		for cut := 0; cut <= len(in); cut++ {
			var s chunkScanner
			n1, done1, err := s.scan([]byte(in[:cut]))
			if err != nil {
				t.Fatalf("%q cut at %d: %v", body, cut, err)
			}
			total := n1
			if !done1 {
				n2, done2, err := s.scan([]byte(in[cut:]))
				if err != nil || !done2 {
					t.Fatalf("%q cut at %d: done=%v err=%v", body, cut, done2, err)
				}
				total += n2
			}
			if total != len(body) {
				t.Fatalf("%q cut at %d: the body ends at %d, want %d", body, cut, total, len(body))
			}
		}
		got, err := io.ReadAll(httputil.NewChunkedReader(bufio.NewReader(strings.NewReader(body))))
		if err != nil || len(got) == 0 {
			t.Fatalf("net/http reads %q: %q, %v", body, got, err)
		}
	}
}

func TestChunkScannerRefusesWhatIsNotChunked(t *testing.T) {
	for _, bad := range []string{"zz\r\n", "\r\n", "5\r\nhelloXX", "1234567890abcdef0\r\n", "A\nabcdefghij\r\n", "1\r\na\n0\r\n\r\n"} {
		var s chunkScanner
		if _, _, err := s.scan([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
