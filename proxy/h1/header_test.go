package h1

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// TestRawHeadSeesTheHeadAsTheParserConsumesIt: whether the head arrives
// in one read or a byte at a time, and whether or not it fits in the read
// buffer, rawHead yields exactly the bytes http.ReadRequest then parses
// as the head, and leaves the rest (body, next request) to be read.
func TestRawHeadSeesTheHeadAsTheParserConsumesIt(t *testing.T) {
	short := "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n"
	long := "POST /a HTTP/1.1\nHost: a\nX-Pad: " + strings.Repeat("p", 300) + "\nContent-Length: 3\n\n"
	for _, head := range []string{short, long} {
		for _, oneByte := range []bool{false, true} {
			r := strings.NewReader(head + "abcGET /next HTTP/1.1\r\nHost: a\r\n\r\n")
			hr := &headReader{r: r, n: 1 << 20}
			if oneByte {
				hr.r = iotest.OneByteReader(r)
			}
			br := bufio.NewReaderSize(hr, 128)
			var rec []byte
			got := string(rawHead(br, hr, &rec))
			fits := len(head) <= br.Size()
			if fits && got != head {
				t.Fatalf("head of %d bytes, one byte a read %v: rawHead = %q", len(head), oneByte, got)
			}
			if !fits && (got != "" || hr.rec == nil) {
				t.Fatalf("head of %d bytes in a %d-byte buffer: rawHead = %q, recording %v; want nil and recording", len(head), br.Size(), got, hr.rec != nil)
			}
			req, err := http.ReadRequest(br)
			if err != nil {
				t.Fatal(err)
			}
			if !fits {
				hr.rec = nil
				if got := string(rec[:len(rec)-br.Buffered()]); got != head {
					t.Fatalf("recorded head = %q, want %q", got, head)
				}
			}
			if fr := framingOf([]byte(head)); !fr.contentLength || fr.transferEncoding {
				t.Fatalf("framingOf(%q) = %+v", head, fr)
			}
			body := make([]byte, 3)
			if _, err := io.ReadFull(req.Body, body); string(body) != "abc" {
				t.Fatalf("body %q, %v", body, err)
			}
		}
	}
}

func TestHeadEnd(t *testing.T) {
	for in, want := range map[string]int{
		"GET / HTTP/1.1\r\n\r\n":            18,
		"GET / HTTP/1.1\n\nrest":            16,
		"GET / HTTP/1.1\r\nA: b\r\n\r\nx":   24,
		"GET / HTTP/1.1\r\nA: b\n\r\n":      23,
		"GET / HTTP/1.1\r\nA: b\r\n":        -1,
		"GET / HTTP/1.1\r\nA: b\r\n\r":      -1,
		"GET / HTTP/1.1\r\nA: b\r\n \r\n\n": 26, // a blank continuation line
		"GET / HTTP/1.1":                    -1,
		"":                                  -1,
	} {
		if got := headEnd([]byte(in)); got != want {
			t.Errorf("headEnd(%q) = %d, want %d", in, got, want)
		}
	}
}
