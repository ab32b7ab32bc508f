//go:build linux

package h1loop

import (
	"bytes"
	"io"
)

// memBody is a request body the loop read whole with its head. It is a
// pipeline.BufferedBody: every attempt reads it from its first byte.
type memBody struct {
	b []byte
	r bytes.Reader
}

func newBody(b []byte) *memBody {
	m := &memBody{b: b}
	m.r.Reset(b)
	return m
}

func (m *memBody) Read(p []byte) (int, error) { return m.r.Read(p) }
func (m *memBody) Close() error               { return nil }

// NewReader returns a reader of the whole body.
func (m *memBody) NewReader() io.Reader { return bytes.NewReader(m.b) }
