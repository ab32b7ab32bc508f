package plane

import (
	"fmt"

	"github.com/switchboard-dev/switchboard/config"
)

// loadUpstreamTLS loads the TLS settings of uc into next, reading its
// certificate files again (a reload picks up renewed certificates). When
// neither the settings nor the files changed since prev, next keeps prev's
// tls.Config: the same pointer, so that the transport (with its
// connections and session cache) and the health checks are kept.
func (p *Plane) loadUpstreamTLS(name string, uc *config.Upstream, prev, next *Upstream) error {
	c, sum, err := uc.LoadTLS()
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	if c == nil {
		return nil
	}
	if prev != nil && prev.tls != nil && prev.tlsSum == sum {
		c = prev.tls
	} else if c.InsecureSkipVerify {
		p.log.Warn("upstream TLS certificates are not verified (tls.insecure_skip_verify)", "upstream", name)
	}
	next.tls, next.tlsSum = c, sum
	return nil
}
