package health

import (
	"context"
	"crypto/tls"
)

// checkSessionCacheSize is how many TLS sessions a check keeps for
// resumption: a check opens a new connection every interval, and a
// resumed handshake costs the endpoint a fraction of a full one.
const checkSessionCacheSize = 256

// checkTLS is a check's copy of cfg (nil: nil) with a session cache.
func checkTLS(cfg *tls.Config) *tls.Config {
	if cfg == nil {
		return nil
	}
	c := cfg.Clone()
	if c.ClientSessionCache == nil {
		c.ClientSessionCache = tls.NewLRUClientSessionCache(checkSessionCacheSize)
	}
	return c
}

// scheme is the URL scheme of a check's request.
func scheme(cfg *tls.Config) string {
	if cfg != nil {
		return "https://"
	}
	return "http://"
}

// tlsHandshakeCheck connects to addr and completes a TLS handshake with
// cfg.
func tlsHandshakeCheck(ctx context.Context, cfg *tls.Config, addr string) error {
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
