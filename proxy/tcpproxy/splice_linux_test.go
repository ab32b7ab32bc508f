package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestForwardingUsesSplice runs a 4 MiB transfer through the proxy under
// strace and checks that the bytes moved with splice(2), i.e. that nothing
// on the data path hides the *net.TCPConn from ReadFrom. The backend and the
// client copy in user space, so every splice call is the proxy's.
func TestForwardingUsesSplice(t *testing.T) {
	strace := ciRequires(t, "strace", "strace")
	out := filepath.Join(t.TempDir(), "strace.txt")
	cmd := exec.Command(strace, "-f", "-e", "trace=splice", "-o", out,
		os.Args[0], "-test.run=^TestSpliceHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TCPPROXY_SPLICE_HELPER=1")
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strace %s: %v\n%s", strings.Join(cmd.Args, " "), err, log)
	}
	if !strings.Contains(string(log), "splice helper: moved") {
		t.Fatalf("the helper did not run:\n%s", log)
	}
	trace, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// A splice that moved bytes: "splice(12, NULL, 14, NULL, 1048576, SPLICE_F_NONBLOCK) = 65536".
	moved := regexp.MustCompile(`(?m)splice\(.*\) = [1-9][0-9]*$`).FindAll(trace, -1)
	if len(moved) == 0 {
		t.Fatalf("no splice(2) call moved bytes during a 4 MiB transfer through the proxy; strace output:\n%.2000s", trace)
	}
	t.Logf("%d splice calls moved bytes; %s", len(moved), log)
}

// TestSpliceHelper is the process TestForwardingUsesSplice traces.
func TestSpliceHelper(t *testing.T) {
	if os.Getenv("TCPPROXY_SPLICE_HELPER") != "1" {
		t.Skip("run by TestForwardingUsesSplice")
	}
	// A backend that copies in user space: the wrapper hides ReadFrom.
	b := startServer(t, func(c *net.TCPConn) {
		io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 32<<10))
		c.CloseWrite()
	})
	up := newUpstream(t, "app", rr(), b.addr)
	p := startProxy(t, Config{Name: "t", Upstream: "app"}, up)
	c := p.dial(t)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	const size = 4 << 20
	go func() {
		buf := make([]byte, 64<<10)
		for n := 0; n < size; n += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
		c.CloseWrite()
	}()
	n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{c}, make([]byte, 32<<10))
	if err != nil || n != size {
		t.Fatalf("echoed %d bytes, %v; want %d", n, err, size)
	}
	fmt.Printf("splice helper: moved %d bytes each way\n", n)
}
