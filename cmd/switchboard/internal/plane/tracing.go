package plane

import (
	"context"
	"sync"
	"time"

	"github.com/switchboard-dev/switchboard/cmd/switchboard/internal/tracing"
	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/proxy/httpproxy"
)

// tracingState is the running tracing provider (nil: tracing off) and the
// ones a reload replaced, still flushing.
type tracingState struct {
	cur      *tracing.Provider
	tracer   *httpproxy.Tracer
	flushing sync.WaitGroup
}

// tracingChange is the provider an Apply prepared: the running one when
// the settings are unchanged, or a new one.
type tracingChange struct {
	s      *tracingState
	next   *tracing.Provider
	tracer *httpproxy.Tracer
	made   bool // next is new: discard shuts it down, commit the old one
}

// prepareTracing builds the provider of cfg's tracing block, unless the
// running one has the same settings; p.mu is held.
func (p *Plane) prepareTracing(cfg *config.Config) (*tracingChange, error) {
	s := &p.tracing
	if s.cur.Same(cfg.Tracing) {
		return &tracingChange{s: s, next: s.cur, tracer: s.tracer}, nil
	}
	c := &tracingChange{s: s, made: true}
	if cfg.Tracing == nil {
		return c, nil
	}
	tp, err := tracing.New(cfg.Tracing, p.log)
	if err != nil {
		return nil, err
	}
	c.next, c.tracer = tp, httpproxy.NewTracer(tp.Tracer())
	return c, nil
}

// discard drops a prepared provider that will not run.
func (c *tracingChange) discard() {
	if c.made && c.next != nil {
		c.next.Shutdown(context.Background())
	}
}

// commit makes the prepared provider the running one. A replaced provider
// sends the spans it has in the background and stops; the spans of
// requests still in flight on it when it stops are dropped.
func (c *tracingChange) commit() {
	s := c.s
	if !c.made {
		return
	}
	old := s.cur
	s.cur, s.tracer = c.next, c.tracer
	if old != nil {
		s.flushing.Add(1)
		go func() {
			defer s.flushing.Done()
			stopProvider(old)
		}()
	}
}

// shutdown sends the running provider's spans and stops it, after the
// replaced ones are done; the listeners have stopped.
func (s *tracingState) shutdown() {
	s.flushing.Wait()
	if s.cur != nil {
		stopProvider(s.cur)
		s.cur, s.tracer = nil, nil
	}
}

// providerStopTimeout bounds the last export of a provider being stopped.
const providerStopTimeout = 5 * time.Second

func stopProvider(tp *tracing.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), providerStopTimeout)
	defer cancel()
	tp.Shutdown(ctx)
}
