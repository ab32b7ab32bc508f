package grpcclient

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/fallback"
)

// StreamFallbackFunc answers a failed stream in the server's stead with a
// stream of its own (FallbackStream makes one from a function). req is the
// request of a server-streaming call; nil for client and bidirectional
// streams, whose messages the fallback never sees. The context rules of
// FallbackFunc apply.
type StreamFallbackFunc func(ctx context.Context, desc *grpc.StreamDesc, method string, req any, cause error) (grpc.ClientStream, error)

// StreamFallbackStep is one named way to answer a stream.
type StreamFallbackStep struct {
	Name string
	Func StreamFallbackFunc
}

// StreamFallback answers a stream that failed, with a code in on (0:
// DefaultFailureCodes), before the server sent any message: when creating
// it failed (an open breaker, no endpoint), or when its first RecvMsg did.
// A stream that has delivered a message is never replaced, since the
// caller has acted on part of the server's answer. The first step that
// returns a stream takes the server's place: RecvMsg, SendMsg, CloseSend,
// Header and Trailer go to it from then on, and Header and Trailer carry
// MetadataDegraded, as do the call's grpc.Header and grpc.Trailer options.
// When every step fails the caller sees the stream's own error.
//
// The steps run in the RecvMsg that found the failure, once, and no lock
// is held while they or the streams' methods block: a SendMsg or Header
// of another goroutine goes on meanwhile. A message sent after the
// server's stream failed and before a step answered is dropped (a step
// never sees a client or bidirectional stream's messages); once every
// step failed, SendMsg returns io.EOF, and RecvMsg the stream's error.
func StreamFallback(on Codes, steps ...StreamFallbackStep) grpc.StreamClientInterceptor {
	on = orDefault(on)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		fs := &fallbackStream{ctx: ctx, desc: desc, method: method, on: on, steps: steps, opts: opts}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			if !on.Has(status.Code(err)) || callersMistake(err) || len(steps) == 0 {
				return nil, err
			}
			// Take the request (SendMsg) and answer at the first RecvMsg,
			// as a stream that failed there.
			fs.cause = err
			return fs, nil
		}
		fs.server = cs
		return fs, nil
	}
}

// fallbackStream is the server's stream until a fallback takes over.
type fallbackStream struct {
	server grpc.ClientStream // nil when creating it failed
	ctx    context.Context
	desc   *grpc.StreamDesc
	method string
	on     Codes
	steps  []StreamFallbackStep
	opts   []grpc.CallOption

	takeover sync.Once // runs the steps

	mu       sync.Mutex // guards what follows; never held across a call
	req      any
	received bool
	cause    error             // why the server's stream is out
	sub      grpc.ClientStream // the fallback's, once it answers
	gaveUp   bool              // every step failed
	degraded string
}

// state returns the stream to use: the fallback's once it answers, else
// the server's while it is in (nil when it is out).
func (s *fallbackStream) state() (sub, server grpc.ClientStream, cause error, gaveUp bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cause == nil {
		server = s.server
	}
	return s.sub, server, s.cause, s.gaveUp
}

func (s *fallbackStream) SendMsg(m any) error {
	s.mu.Lock()
	if !s.desc.ClientStreams && s.req == nil {
		s.req = m
	}
	s.mu.Unlock()
	sub, server, _, gaveUp := s.state()
	switch {
	case sub != nil:
		return sub.SendMsg(m)
	case server != nil:
		return server.SendMsg(m)
	case gaveUp:
		return io.EOF // RecvMsg returns the stream's error
	}
	return nil // the fallback answers at RecvMsg
}

func (s *fallbackStream) CloseSend() error {
	sub, server, _, _ := s.state()
	switch {
	case sub != nil:
		return sub.CloseSend()
	case server != nil:
		return server.CloseSend()
	}
	return nil
}

func (s *fallbackStream) RecvMsg(m any) error {
	sub, server, cause, _ := s.state()
	if sub != nil {
		return sub.RecvMsg(m)
	}
	if server != nil {
		err := server.RecvMsg(m)
		s.mu.Lock()
		switch {
		case err == nil:
			s.received = true
			s.mu.Unlock()
			return nil
		case errors.Is(err, io.EOF) || s.received || !s.on.Has(status.Code(err)):
			s.mu.Unlock()
			return err
		}
		if s.cause == nil {
			s.cause = err
		}
		cause = s.cause
		s.mu.Unlock()
	}
	s.takeover.Do(func() { s.answer(cause) })
	if sub, _, _, _ = s.state(); sub == nil {
		return cause
	}
	return sub.RecvMsg(m)
}

// answer runs the steps for cause and installs the stream of the first
// that answers.
func (s *fallbackStream) answer(cause error) {
	ctx := s.ctx
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	s.mu.Lock()
	req := s.req
	s.mu.Unlock()
	run := make([]fallback.Step[grpc.ClientStream], len(s.steps))
	for i, st := range s.steps {
		run[i] = fallback.Step[grpc.ClientStream]{Name: st.Name, Run: func(ctx context.Context) (grpc.ClientStream, error) {
			return st.Func(ctx, s.desc, s.method, req, cause)
		}}
	}
	sub, step, err := fallback.First(ctx, run...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || sub == nil {
		s.gaveUp = true
		return
	}
	s.sub = sub
	s.degraded = fallback.Degraded(step, reason(cause))
	markDegraded(s.opts, s.degraded)
}

func (s *fallbackStream) withDegraded(md metadata.MD) metadata.MD {
	s.mu.Lock()
	d := s.degraded
	s.mu.Unlock()
	if d == "" {
		return md
	}
	md = md.Copy()
	if md == nil {
		md = metadata.MD{}
	}
	md.Set(MetadataDegraded, d)
	return md
}

func (s *fallbackStream) Header() (metadata.MD, error) {
	sub, _, _, _ := s.state()
	switch {
	case sub != nil:
		md, err := sub.Header()
		return s.withDegraded(md), err
	case s.server == nil:
		return s.withDegraded(nil), nil
	}
	md, err := s.server.Header()
	return s.withDegraded(md), err
}

func (s *fallbackStream) Trailer() metadata.MD {
	sub, _, _, _ := s.state()
	switch {
	case sub != nil:
		return s.withDegraded(sub.Trailer())
	case s.server == nil:
		return s.withDegraded(nil)
	}
	return s.withDegraded(s.server.Trailer())
}

func (s *fallbackStream) Context() context.Context {
	if s.server == nil {
		return s.ctx
	}
	return s.server.Context()
}

// FallbackStream returns a client stream for a StreamFallbackFunc: each
// RecvMsg calls recv to fill the message, until recv returns an error
// (io.EOF ends the stream); SendMsg and CloseSend drop what they get.
func FallbackStream(ctx context.Context, recv func(m any) error) grpc.ClientStream {
	return &funcStream{ctx: ctx, recv: recv}
}

type funcStream struct {
	ctx  context.Context
	recv func(m any) error
}

func (s *funcStream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (s *funcStream) Trailer() metadata.MD         { return metadata.MD{} }
func (s *funcStream) CloseSend() error             { return nil }
func (s *funcStream) Context() context.Context     { return s.ctx }
func (s *funcStream) SendMsg(any) error            { return nil }
func (s *funcStream) RecvMsg(m any) error          { return s.recv(m) }
