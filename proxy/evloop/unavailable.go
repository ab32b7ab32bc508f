//go:build !linux

package evloop

// Loop is the event loop; there is none on this system.
type Loop struct{}

// New reports ErrUnavailable: only Linux has the event-loop engine.
func New() (*Loop, error) { return nil, ErrUnavailable }
