package tcpproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
	tcpproxy "github.com/switchboard-dev/switchboard/proxy/tcpproxy"
)

// upstream is a pool behind a balancer: what the proxy's upstreams are.
type upstream struct {
	name string
	bal  balance.Balancer
}

func (u *upstream) Name() string                                    { return u.name }
func (u *upstream) Pick(info *balance.Info) (balance.Result, error) { return u.bal.Pick(info) }

// A TCP listener in front of one echo backend: bytes go through unchanged,
// the client's half-close reaches the backend, and Shutdown drains.
func ExampleListener() {
	backend, _ := net.Listen("tcp", "127.0.0.1:0")
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(c, c) // echo until the client's EOF
				c.Close()
			}()
		}
	}()

	pool := endpoint.NewPool("echo")
	bal, _ := balance.New(balance.Config{Policy: balance.RoundRobinName})
	defer pool.Subscribe(bal.Update)()
	pool.Update([]endpoint.Spec{{Address: backend.Addr().String()}})
	ups := map[string]tcpproxy.Upstream{"echo": &upstream{name: "echo", bal: bal}}

	ln, _ := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	l, err := tcpproxy.NewListener(ln, tcpproxy.Config{Name: "example", Upstream: "echo"},
		func(name string) tcpproxy.Upstream { return ups[name] }, nil, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	go l.Serve()

	c, _ := net.Dial("tcp", l.Addr().String())
	c.Write([]byte("hello through the proxy"))
	c.(*net.TCPConn).CloseWrite()
	reply, _ := io.ReadAll(c)
	c.Close()
	fmt.Println(string(reply))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println("shutdown:", l.Shutdown(ctx))
	// Output:
	// hello through the proxy
	// shutdown: <nil>
}
