package dns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchboard-dev/switchboard/registry"
)

// answer is one name's records of one type, and the TTL to cache them for.
type answer struct {
	rrs []mdns.RR
	// extra is the additional section (SRV answers carry their targets'
	// addresses there, as Consul does).
	extra []mdns.RR
	ttl   time.Duration
}

// resolve turns name (fully qualified) into instances of service and
// the shortest TTL of the records used.
func (r *Registry) resolve(ctx context.Context, name, service string) ([]registry.Instance, time.Duration, error) {
	if service == "" {
		service = strings.TrimSuffix(name, ".")
	}
	var (
		insts []registry.Instance
		ttl   time.Duration
		err   error
	)
	if r.typ == TypeA {
		var addrs []string
		addrs, ttl, err = r.addresses(ctx, name, nil)
		for _, a := range addrs {
			insts = append(insts, registry.Instance{
				ID: net.JoinHostPort(a, strconv.Itoa(r.port)), Service: service,
				Address: a, Port: r.port, Weight: 1,
				Meta: map[string]string{"host": strings.TrimSuffix(name, ".")},
			})
		}
	} else {
		insts, ttl, err = r.resolveSRV(ctx, name, service)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("dns: resolving %s: %w", strings.TrimSuffix(name, "."), err)
	}
	if insts == nil {
		insts = []registry.Instance{}
	}
	slices.SortFunc(insts, func(a, b registry.Instance) int { return cmp.Compare(a.ID, b.ID) })
	insts = slices.CompactFunc(insts, func(a, b registry.Instance) bool { return a.ID == b.ID })
	return insts, ttl, nil
}

// resolveSRV follows RFC 2782: only the lowest priority present is used
// (higher priorities are fallbacks, not traffic shares); the weight becomes
// Instance.Weight (0 means 1); each target's addresses come from the
// additional section, or else from A and AAAA queries.
func (r *Registry) resolveSRV(ctx context.Context, name, service string) ([]registry.Instance, time.Duration, error) {
	ans, err := r.query(ctx, name, mdns.TypeSRV)
	if err != nil {
		return nil, 0, err
	}
	ttl := ans.ttl
	var srvs []*mdns.SRV
	for _, rr := range ans.rrs {
		if s, ok := rr.(*mdns.SRV); ok && s.Target != "." {
			srvs = append(srvs, s)
		}
	}
	if len(srvs) == 0 {
		return nil, ttl, nil
	}
	lowest := slices.MinFunc(srvs, func(a, b *mdns.SRV) int { return cmp.Compare(a.Priority, b.Priority) }).Priority
	var insts []registry.Instance
	for _, s := range srvs {
		if s.Priority != lowest {
			continue
		}
		addrs, attl, err := r.addresses(ctx, s.Target, ans.extra)
		if err != nil {
			return nil, 0, fmt.Errorf("target %s: %w", s.Target, err)
		}
		ttl = min(ttl, attl)
		weight := int(s.Weight)
		if weight == 0 {
			weight = 1
		}
		for _, a := range addrs {
			insts = append(insts, registry.Instance{
				ID: net.JoinHostPort(a, strconv.Itoa(int(s.Port))), Service: service,
				Address: a, Port: int(s.Port), Weight: weight,
				Meta: map[string]string{
					"target":   strings.TrimSuffix(s.Target, "."),
					"priority": strconv.Itoa(int(s.Priority)),
				},
			})
		}
	}
	return insts, ttl, nil
}

// addresses returns host's IPv4 and IPv6 addresses and their shortest TTL:
// from extra when it holds any for host, else from A and AAAA queries.
func (r *Registry) addresses(ctx context.Context, host string, extra []mdns.RR) ([]string, time.Duration, error) {
	var addrs []string
	ttl := time.Duration(-1)
	for _, rr := range extra {
		if !strings.EqualFold(rr.Header().Name, host) {
			continue
		}
		if a := ipOf(rr); a != "" {
			addrs = append(addrs, a)
			ttl = minTTL(ttl, rrTTL(rr))
		}
	}
	if len(addrs) > 0 {
		return addrs, ttl, nil
	}
	for _, t := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		ans, err := r.query(ctx, host, t)
		if err != nil {
			return nil, 0, err
		}
		ttl = minTTL(ttl, ans.ttl)
		for _, rr := range ans.rrs {
			// A CNAME chain ends in the records we asked for; take every
			// address in the answer, whatever its owner name.
			if a := ipOf(rr); a != "" {
				addrs = append(addrs, a)
			}
		}
	}
	return addrs, ttl, nil
}

func ipOf(rr mdns.RR) string {
	switch v := rr.(type) {
	case *mdns.A:
		return v.A.String()
	case *mdns.AAAA:
		return v.AAAA.String()
	}
	return ""
}

func rrTTL(rr mdns.RR) time.Duration { return time.Duration(rr.Header().Ttl) * time.Second }

// minTTL is the smaller of two TTLs, where -1 means none yet.
func minTTL(a, b time.Duration) time.Duration {
	if a < 0 {
		return b
	}
	return min(a, b)
}

// errServer is a server's answer that another server might not give
// (SERVFAIL, REFUSED, ...): try the next server.
type errServer struct {
	server string
	rcode  int
}

func (e *errServer) Error() string {
	return fmt.Sprintf("%s answered %s", e.server, mdns.RcodeToString[e.rcode])
}

// query asks each server in turn until one answers NOERROR or NXDOMAIN.
// The answer's records of type qtype (and CNAMEs leading to them) set the
// TTL; a negative answer is cached for the SOA's negative TTL (RFC 2308:
// the smaller of the SOA record's TTL and its MINIMUM field), or MinTTL
// without an SOA.
func (r *Registry) query(ctx context.Context, name string, qtype uint16) (*answer, error) {
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(name), qtype)
	m.RecursionDesired = true
	m.SetEdns0(udpSize, false)
	var errs []error
	for _, server := range r.servers {
		resp, err := r.exchange(ctx, m, server)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			errs = append(errs, err)
			continue
		}
		switch resp.Rcode {
		case mdns.RcodeSuccess, mdns.RcodeNameError:
		default:
			errs = append(errs, &errServer{server: server, rcode: resp.Rcode})
			continue
		}
		ans := &answer{extra: resp.Extra, ttl: -1}
		for _, rr := range resp.Answer {
			switch rr.Header().Rrtype {
			case qtype:
				ans.rrs = append(ans.rrs, rr)
				ans.ttl = minTTL(ans.ttl, rrTTL(rr))
			case mdns.TypeCNAME:
				ans.ttl = minTTL(ans.ttl, rrTTL(rr))
			}
		}
		if len(ans.rrs) == 0 {
			ans.ttl = r.minTTL
			for _, rr := range resp.Ns {
				if soa, ok := rr.(*mdns.SOA); ok {
					ans.ttl = min(rrTTL(soa), time.Duration(soa.Minttl)*time.Second)
				}
			}
		}
		return ans, nil
	}
	return nil, errors.Join(errs...)
}

// exchange sends m to server over UDP, and again over TCP when the answer
// was truncated.
func (r *Registry) exchange(ctx context.Context, m *mdns.Msg, server string) (*mdns.Msg, error) {
	c := &mdns.Client{Net: "udp", Timeout: r.timeout, UDPSize: udpSize}
	qctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, _, err := c.ExchangeContext(qctx, m, server)
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		resp, _, err = c.ExchangeContext(qctx, m, server)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", server, err)
	}
	return resp, nil
}
