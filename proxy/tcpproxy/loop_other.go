//go:build !linux

package tcpproxy

import (
	"errors"
	"net"
	"syscall"
)

// presetControl is Listen's Control: nothing here (the goroutine engine
// sets each connection's options).
var presetControl func(network, address string, c syscall.RawConn) error

// loopAvailable: there is no event-loop engine on this system (Linux
// only); every listener runs on the goroutine engine.
const loopAvailable = false

// loopEngine is never made here (Config.Validate refuses eventloop, and
// auto chooses the goroutine engine).
type loopEngine struct{}

func newLoopEngine(*Listener) *loopEngine { return nil }
func (*loopEngine) start() error          { return nil }
func (*loopEngine) wait() error           { return nil }
func (*loopEngine) stopAccepting()        {}
func (*loopEngine) cutAll() int           { return 0 }
func (*loopEngine) stop()                 {}
func (*loopEngine) activeConns() int      { return 0 }

func (*loopEngine) dupSocket() (*net.TCPListener, error) { return nil, errors.New("no event loops") }

// dupListener is for an engine change, which never happens here: there
// is one engine.
func dupListener(*net.TCPListener) (*net.TCPListener, error) {
	return nil, errors.New("one engine only: no change of engine")
}
