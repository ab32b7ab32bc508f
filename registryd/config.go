package registryd

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
)

// Defaults applied by New to a zero Config field.
const (
	DefaultListen       = "127.0.0.1:8500"
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxStateBytes is the default budget of the registry's state
	// (see Config.MaxStateBytes). It holds the 10,000 instances the
	// registry takes at most when each has a few tags and one check
	// (about 4.8 KiB of state apiece), while a registry full of the
	// largest registrations loads in about 1.5 s and takes a few hundred
	// MB of memory (measured on the 2-core development machine; the 286 MB
	// snapshot of issue 16 took 4.3 GB).
	DefaultMaxStateBytes = 64 << 20
)

// The range of Config.MaxStateBytes. Below the floor a budget holds only
// a handful of registrations (a check alone is charged 4 KiB of output);
// above the ceiling a snapshot would take gigabytes of memory to load.
// The ceiling also bounds what New reads of a snapshot written under
// another budget.
const (
	MinMaxStateBytes = 64 << 10
	MaxMaxStateBytes = 1 << 30
)

// Config configures a Server. The zero value is valid: loopback, no ACL, no
// persistence.
type Config struct {
	// Listen is the host:port Start listens on. Default "127.0.0.1:8500".
	// A non-loopback address needs ACLToken (or ACLTokenFile) unless
	// Insecure is set. Without a token, requests must be addressed (Host)
	// to an IP address, localhost or this host name.
	Listen string
	// ACLToken, when set, is required on every write (and on reads when
	// ACLReads is set), sent as the X-Consul-Token header, as
	// "Authorization: Bearer <token>", or as ?token=.
	ACLToken string
	// ACLTokenFile names a file holding the token (surrounding whitespace
	// trimmed); New reads it. Set at most one of ACLToken and ACLTokenFile.
	ACLTokenFile string
	// ACLReads makes reads need the token too. Default false: reads are open.
	ACLReads bool
	// Insecure allows a non-loopback Listen without a token.
	Insecure bool
	// DataDir, when set, keeps a snapshot of the registrations
	// (DataDir/registry.json) that New loads and changes rewrite. Empty:
	// memory only.
	DataDir string
	// MaxBodyBytes caps a request body; larger bodies get 413. Default 1 MiB.
	MaxBodyBytes int64
	// MaxStateBytes is the budget of the registry's state: the sum of
	// what each registered instance takes in the snapshot, counted as
	// the snapshot stores it (its registration, and each check's state
	// with room for a full output). A registration that would take the
	// sum over it is refused (HTTP 507) and changes nothing, so whatever
	// was accepted fits in a snapshot that New reads back. Default
	// DefaultMaxStateBytes (64 MiB); from MinMaxStateBytes (64 KiB) to
	// MaxMaxStateBytes (1 GiB). It applies without DataDir too: it
	// bounds memory as well.
	MaxStateBytes int64
	// NodeName is the node name reported in Node and check fields. Default
	// the host name.
	NodeName string
	// Logger receives one line per event worth an operator's attention.
	// Default slog.Default().
	Logger *slog.Logger
}

// Validate reports the first field that makes the configuration unusable,
// naming it as the config file does ("listen: ...").
func (c Config) Validate() error {
	listen := c.Listen
	if listen == "" {
		listen = DefaultListen
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("listen: %q is not host:port: %v", listen, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("listen: port %q is not a number in 0-65535", port)
	}
	if c.ACLToken != "" && c.ACLTokenFile != "" {
		return errors.New("acl_token_file: set either acl_token or acl_token_file, not both")
	}
	if c.ACLToken != "" && strings.TrimSpace(c.ACLToken) != c.ACLToken {
		return errors.New("acl_token: must not begin or end with whitespace")
	}
	hasToken := c.ACLToken != "" || c.ACLTokenFile != ""
	if c.ACLReads && !hasToken {
		return errors.New("acl_reads: requires acl_token or acl_token_file")
	}
	if c.MaxBodyBytes < 0 {
		return fmt.Errorf("max_body_bytes: %d must not be negative", c.MaxBodyBytes)
	}
	if c.MaxStateBytes < 0 {
		return fmt.Errorf("max_state_bytes: %d must not be negative", c.MaxStateBytes)
	}
	if c.MaxStateBytes != 0 && (c.MaxStateBytes < MinMaxStateBytes || c.MaxStateBytes > MaxMaxStateBytes) {
		return fmt.Errorf("max_state_bytes: %d is outside %d (64 KiB) to %d (1 GiB)", c.MaxStateBytes, MinMaxStateBytes, MaxMaxStateBytes)
	}
	if c.NodeName != "" {
		if err := checkName(c.NodeName); err != nil {
			return fmt.Errorf("node_name: %v", err)
		}
	}
	if !hasToken && !c.Insecure && !isLoopbackHost(host) {
		return fmt.Errorf("listen: %q is not a loopback address and no acl_token is set: anyone who can reach it could register and deregister services; set acl_token (or acl_token_file), or insecure: true to allow it", listen)
	}
	return nil
}

// isLoopbackHost reports whether host names only loopback addresses. An
// empty host or an unspecified address (0.0.0.0, ::) listens everywhere.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withDefaults fills zero fields and reads the token file.
func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxStateBytes == 0 {
		c.MaxStateBytes = DefaultMaxStateBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil || checkName(h) != nil {
			h = "switchboard"
		}
		c.NodeName = h
	}
	if c.ACLTokenFile != "" {
		b, err := os.ReadFile(c.ACLTokenFile)
		if err != nil {
			return c, fmt.Errorf("acl_token_file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return c, fmt.Errorf("acl_token_file: %s is empty", c.ACLTokenFile)
		}
		c.ACLToken = tok
	}
	return c, nil
}
