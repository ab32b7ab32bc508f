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
// returns a stream takes over RecvMsg; Header and Trailer then carry
// MetadataDegraded, as do the call's grpc.Header and grpc.Trailer options.
// When every step fails the caller sees the stream's own error.
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
		fs.ClientStream = cs
		return fs, nil
	}
}

// fallbackStream is the server's stream until a fallback takes over.
type fallbackStream struct {
	grpc.ClientStream // the server's; nil when creating it failed
	ctx               context.Context
	desc              *grpc.StreamDesc
	method            string
	on                Codes
	steps             []StreamFallbackStep
	opts              []grpc.CallOption

	mu       sync.Mutex
	req      any
	received bool
	cause    error             // why the server's stream is out
	sub      grpc.ClientStream // the fallback's, once it answers
	degraded string
}

func (s *fallbackStream) SendMsg(m any) error {
	s.mu.Lock()
	if !s.desc.ClientStreams && s.req == nil {
		s.req = m
	}
	failed := s.ClientStream == nil
	s.mu.Unlock()
	if failed {
		return nil // the fallback answers at RecvMsg
	}
	return s.ClientStream.SendMsg(m)
}

func (s *fallbackStream) CloseSend() error {
	if s.ClientStream == nil {
		return nil
	}
	return s.ClientStream.CloseSend()
}

func (s *fallbackStream) RecvMsg(m any) error {
	s.mu.Lock()
	sub, cause := s.sub, s.cause
	s.mu.Unlock()
	if sub != nil {
		return sub.RecvMsg(m)
	}
	if cause == nil {
		err := s.ClientStream.RecvMsg(m)
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case err == nil:
			s.received = true
			return nil
		case errors.Is(err, io.EOF) || s.received || !s.on.Has(status.Code(err)):
			return err
		}
		cause = err
		s.cause = err
	} else {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	if s.sub == nil && !s.answer(cause) {
		return cause
	}
	return s.sub.RecvMsg(m)
}

// answer runs the steps for cause; s.mu is held.
func (s *fallbackStream) answer(cause error) bool {
	ctx := s.ctx
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	run := make([]fallback.Step[grpc.ClientStream], len(s.steps))
	for i, st := range s.steps {
		run[i] = fallback.Step[grpc.ClientStream]{Name: st.Name, Run: func(ctx context.Context) (grpc.ClientStream, error) {
			return st.Func(ctx, s.desc, s.method, s.req, cause)
		}}
	}
	sub, step, err := fallback.First(ctx, run...)
	if err != nil || sub == nil {
		return false
	}
	s.sub = sub
	s.degraded = fallback.Degraded(step, reason(cause))
	markDegraded(s.opts, s.degraded)
	return true
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
	if s.ClientStream == nil {
		return s.withDegraded(nil), nil
	}
	md, err := s.ClientStream.Header()
	return s.withDegraded(md), err
}

func (s *fallbackStream) Trailer() metadata.MD {
	if s.ClientStream == nil {
		return s.withDegraded(nil)
	}
	return s.withDegraded(s.ClientStream.Trailer())
}

func (s *fallbackStream) Context() context.Context {
	if s.ClientStream == nil {
		return s.ctx
	}
	return s.ClientStream.Context()
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
