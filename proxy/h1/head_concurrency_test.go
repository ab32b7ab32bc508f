package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// Two goroutines reading one fast-path body at once (a transport still
// sending a request's body after the handler returned, and the server's
// drain) read exactly its length between them and leave the connection's
// reader at the next request: run with -race, which also reports the
// unlocked version's data race.
func TestLengthBodyIsSafeForTwoReaders(t *testing.T) {
	const n = 4096
	body := bytes.Repeat([]byte("b"), n)
	next := "GET /next HTTP/1.1\r\n"
	br := bufio.NewReaderSize(iotest.OneByteReader(io.MultiReader(bytes.NewReader(body), strings.NewReader(next))), 16)
	lb := &lengthBody{r: br, n: n}
	var wg sync.WaitGroup
	var got [2]int
	for i := range got {
		wg.Go(func() {
			buf := make([]byte, 3)
			for {
				k, err := lb.Read(buf)
				got[i] += k
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if got[0]+got[1] != n {
		t.Fatalf("the two readers read %d+%d bytes of a %d-byte body", got[0], got[1], n)
	}
	rest, _ := io.ReadAll(br)
	if string(rest) != next {
		t.Fatalf("after the body the connection holds %q, want the next request %q", rest, next)
	}
}

// A handler that leaves the request's body to a goroutine still reading
// it (as net/http's HTTP/2 transport does when an upstream answers early)
// does not cost the next request on the connection: the server's drain
// and that goroutine share the body, and the pipelined request behind it
// is answered.
func TestALateBodyReaderDoesNotGarbleTheNextRequest(t *testing.T) {
	late := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/up" {
			io.WriteString(w, "second:"+r.URL.Path)
			return
		}
		body := r.Body
		go func() {
			defer close(late)
			buf := make([]byte, 1)
			for {
				if _, err := body.Read(buf); err != nil {
					return
				}
			}
		}()
		w.WriteHeader(http.StatusUnauthorized)
	})
	ours, _ := startH1(t, h, 1<<20)
	resp := exchange(t, ours, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 4096\r\n\r\n"+strings.Repeat("b", 4096)+
		"GET /next HTTP/1.1\r\nHost: a\r\n\r\nGET /third HTTP/1.1\r\nHost: a\r\n\r\n")
	<-late
	want := "HTTP/1.1 401 Unauthorized\r\n"
	i := strings.Index(resp, want)
	j := strings.Index(resp, "second:/next")
	k := strings.Index(resp, "second:/third")
	if i != 0 || j < 0 || k < j || strings.Count(resp, "HTTP/1.1 200 OK\r\n") != 2 || strings.Count(resp, "HTTP/1.1 ") != 3 {
		t.Fatalf("want 401, then /next and /third answered 200, and nothing else:\n%s", resp)
	}
}
