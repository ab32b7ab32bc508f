//go:build !linux

package h1loop

import (
	"context"
	"net"

	"github.com/switchboard-dev/switchboard/proxy/evloop"
)

// Server is the event-loop front end; there is none on this system.
type Server struct{}

// New reports evloop.ErrUnavailable: only Linux has the event-loop engine.
func New(ln net.Listener, h Handler, handoff func(net.Conn), st Settings, loops int) (*Server, error) {
	return nil, evloop.ErrUnavailable
}

// Listener reports evloop.ErrUnavailable.
func (s *Server) Listener() (*net.TCPListener, error) { return nil, evloop.ErrUnavailable }

// SetSettings does nothing.
func (s *Server) SetSettings(st Settings) {}

// Shutdown does nothing.
func (s *Server) Shutdown(ctx context.Context) error { return nil }

// Close does nothing.
func (s *Server) Close() error { return nil }

// Forget does nothing.
func (s *Server) Forget(addrs []string) {}
