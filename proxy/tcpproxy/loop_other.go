//go:build !linux

package tcpproxy

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
