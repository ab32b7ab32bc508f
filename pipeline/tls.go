package pipeline

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/switchboard-dev/switchboard/retry"
)

// DialTLS opens a TLS connection to addr (host:port) for a Transport: a
// TCP dial with d and a handshake with cfg, both bounded by ctx (give it
// the connect timeout). When cfg has no ServerName, addr's host is
// verified (and sent as SNI unless it is an IP address). A failed
// handshake is wrapped in retry.ErrTLSHandshake, so that the attempt
// counts as a connect failure (retried on another endpoint, counted as
// kind "tls"): nothing was sent.
func DialTLS(ctx context.Context, d *net.Dialer, cfg *tls.Config, addr string) (*tls.Conn, error) {
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("%w with %s: %w", retry.ErrTLSHandshake, addr, err)
	}
	return c, nil
}
