//go:build linux

package h1loop

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// plainHandler forwards every request over route.
type plainHandler struct{ route *pipeline.Route }

func (h plainHandler) Begin(r *http.Request, _ time.Time, _ Exchange) Exchange {
	x := &plainExchange{route: h.route}
	x.call.Req = r
	return x
}

type plainExchange struct {
	route *pipeline.Route
	call  pipeline.Call
}

func (x *plainExchange) Call() (*pipeline.Route, *pipeline.Call, Upstream) {
	return x.route, &x.call, Upstream{MaxIdlePerEndpoint: 4}
}
func (x *plainExchange) Respond(resp *http.Response) http.Header { return resp.Header }
func (x *plainExchange) Fail(err error) (int, http.Header, []byte) {
	return 502, http.Header{}, []byte(err.Error())
}
func (x *plainExchange) Done(status int, _, _ int64, err error) { x.call.Finish(status, err) }

// TestIdleConnectionsHoldNoReadBuffer: a keep-alive connection waiting
// for its next request has given its read buffer back to the loop, and
// the next request takes one from there (a loop with many idle clients
// holds one buffer per busy connection, not per connection).
func TestIdleConnectionsHoldNoReadBuffer(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer be.Close()
	u, err := upstream.New("be", upstream.Config{Targets: []endpoint.Spec{{Address: be.Listener.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	route, err := pipeline.New("r", pipeline.Config{Timeout: 10 * time.Second}, u, pipeline.HTTPTransport{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(ln, plainHandler{route}, func(nc net.Conn) { nc.Close() }, Settings{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lp := s.loops[0]
	// state reads, on the loop, each client connection's read buffer
	// capacity and how many buffers the loop keeps.
	state := func() (caps []int, free int) {
		done := make(chan struct{})
		lp.l.Post(func() {
			for c := range lp.conns {
				caps = append(caps, cap(c.in))
			}
			free = len(lp.free)
			close(done)
		})
		<-done
		return caps, free
	}
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		conns = append(conns, c)
		br := bufio.NewReader(c)
		for j := 0; j < 2; j++ {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
				t.Fatalf("answer %q", b)
			}
		}
	}
	// Each connection is idle: a response's last bytes are written by a
	// handler, which serves the connection's next request (and gives the
	// buffer back) from Soon, right after it returns, before any task
	// posted meanwhile runs. So state sees every connection waiting.
	caps, free := state()
	if len(caps) != len(conns) {
		t.Fatalf("%d connections on the loop, want %d", len(caps), len(conns))
	}
	for _, n := range caps {
		if n != 0 {
			t.Fatalf("idle connections' read buffers: %v; want all given back", caps)
		}
	}
	if free != 1 {
		t.Fatalf("the loop keeps %d buffers, want 1: one at a time was in use", free)
	}
}
