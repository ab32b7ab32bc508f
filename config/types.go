package config

import (
	"time"

	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// Config is a whole switchboard configuration file. The field comments are
// the user's reference; docs/configuration.md repeats them with examples.
type Config struct {
	// Admin is the admin API listener (metrics, health, upstream state).
	Admin Admin `yaml:"admin"`
	// Log sets the process log.
	Log Log `yaml:"log"`
	// ShutdownTimeout bounds how long a graceful shutdown (SIGTERM/SIGINT)
	// or the removal of a listener waits for in-flight requests. Default 15s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// Listeners are the proxy's front doors.
	Listeners []Listener `yaml:"listeners"`
	// Upstreams are the named pools that routes send traffic to.
	Upstreams map[string]*Upstream `yaml:"upstreams"`
	// Registry, when present, runs the embedded, Consul-compatible
	// registry in this process. Keys: docs/registry.md.
	Registry *Registry `yaml:"registry"`
	// Registries are the external registries (consul, etcd, dns, static)
	// that upstreams discover their endpoints from, by name. The name
	// "embedded" is reserved for the embedded registry.
	Registries map[string]*RegistryBackend `yaml:"registries"`
	// Discovery tunes the cached view every discovery goes through.
	Discovery Discovery `yaml:"discovery"`
	// Tracing, when present, exports OpenTelemetry traces over OTLP.
	// Keys: docs/tracing.md.
	Tracing *Tracing `yaml:"tracing"`

	// File is the path the configuration was loaded from, or the name
	// given to Parse ("" if none). Not a YAML key.
	File string `yaml:"-"`
}

// Admin configures the admin listener.
type Admin struct {
	// Listen is the admin API's host:port. Default 127.0.0.1:9901. An empty
	// string after an explicit `listen: ""` is not allowed; use
	// `enabled: false` to turn the admin API off.
	Listen string `yaml:"listen"`
	// Enabled turns the admin API on or off. Default true.
	Enabled *bool `yaml:"enabled"`
	// Token is the bearer token that write endpoints require. Required when
	// Listen is not a loopback address.
	Token string `yaml:"token"`
}

// Log configures the process log.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is text or json. Default text.
	Format string `yaml:"format"`
}

// Listener is one front door of the proxy.
type Listener struct {
	// Name identifies the listener in metrics and logs. Required, unique.
	Name string `yaml:"name"`
	// Protocol is http (the default) or tcp.
	Protocol string `yaml:"protocol"`
	// Listen is host:port. Required, unique across listeners. An empty
	// host means all interfaces; port 0 asks for any free port (tests).
	Listen string `yaml:"listen"`
	// TLS, when set, terminates TLS on this listener and offers HTTP/2.
	TLS *TLS `yaml:"tls"`
	// H2C serves cleartext HTTP/2 to clients that open with its preface
	// (prior knowledge, as gRPC clients do) on a listener without tls.
	// Default true.
	H2C *bool `yaml:"h2c"`
	// Engine is the HTTP/1.1 engine serving a listener without tls:
	// eventloop (Linux: per-core event loops serve the common request
	// themselves and hand every other connection to the goroutine
	// engine; see docs/architecture.md), goroutine (a goroutine per
	// connection, on every system), or auto (the default): the event
	// loop on Linux for a listener without tls, else the goroutine
	// engine. On a tcp listener it is the connection engine: eventloop
	// (Linux: event loops accept, connect and splice every connection;
	// not with tls_passthrough or proxy_protocol.accept), goroutine, or
	// auto: the event loop where it can serve the listener. See
	// EventLoop.
	Engine string `yaml:"engine"`
	// RedirectHTTPS answers every request of a listener without tls with
	// a 308 redirect to the same URL over https, instead of routing it.
	RedirectHTTPS bool `yaml:"redirect_https"`
	// RedirectHTTPSPort is the port of the redirect's https URL. Default
	// 443 (left out of the URL).
	RedirectHTTPSPort int `yaml:"redirect_https_port"`
	// Timeouts for client connections.
	Timeouts ListenerTimeouts `yaml:"timeouts"`
	// MaxHeaderBytes caps the request line plus headers. Default 64KiB.
	MaxHeaderBytes Size `yaml:"max_header_bytes"`
	// MaxBodyBytes caps a request body; a larger body gets 413. 0, the
	// default, means no cap: bodies are streamed, never buffered, and the
	// route's request timeout bounds them in time.
	MaxBodyBytes Size `yaml:"max_body_bytes"`
	// AccessLog writes one line per request to the process log. Default off.
	AccessLog bool `yaml:"access_log"`
	// TrustedProxies are the addresses and CIDR prefixes of proxies in
	// front of this listener whose X-Forwarded-For is believed when a
	// route's access lists or forward_auth need the client's address.
	// http only. Default none: the client is the connection's peer.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Routes are tried in order; the first match wins. http only.
	Routes []Route `yaml:"routes"`
	// AutoRoutes adds routes from the embedded registry's registrations:
	// a service tagged urlprefix-/orders (or urlprefix-host/orders) gets a
	// route to its instances, after the listener's own routes. http only;
	// needs the registry block.
	AutoRoutes bool `yaml:"auto_routes"`

	// The keys below are for tcp listeners (docs/tcp.md).

	// Upstream is where a tcp listener forwards connections (the default
	// when SNI routes are set).
	Upstream string `yaml:"upstream"`
	// TLSPassthrough reads the TLS ClientHello's server name, without
	// terminating TLS, so that SNI can route by it.
	TLSPassthrough bool `yaml:"tls_passthrough"`
	// SNI routes connections by the ClientHello's server name: exact names
	// and one-label wildcards (*.example.com). Needs tls_passthrough.
	SNI []SNIRoute `yaml:"sni"`
	// ConnectAttempts is how many endpoints a connection tries before it
	// is closed (a failed connect moves on to the next). Default 3.
	ConnectAttempts int `yaml:"connect_attempts"`
	// MaxConns caps the listener's open connections; 0 means no cap.
	MaxConns int `yaml:"max_conns"`
	// MaxConnsPerEndpoint caps the connections to each endpoint; full
	// endpoints are skipped. 0 means no cap.
	MaxConnsPerEndpoint int `yaml:"max_conns_per_endpoint"`
	// Queue lets connections over max_conns wait for a slot.
	Queue *TCPQueue `yaml:"queue"`
	// ProxyProtocol sends and accepts PROXY protocol headers.
	ProxyProtocol *ProxyProtocol `yaml:"proxy_protocol"`
}

// SNIRoute sends TLS connections whose server name matches to an upstream.
type SNIRoute struct {
	// Names are exact server names or *.suffix wildcards. Required.
	Names []string `yaml:"names"`
	// Upstream serves the matching connections. Required.
	Upstream string `yaml:"upstream"`
}

// TCPQueue is the bounded wait for a connection slot.
type TCPQueue struct {
	// Size is how many connections may wait. Required, at least 1.
	Size int `yaml:"size"`
	// Timeout closes a connection that waited this long. Default 1s.
	Timeout Duration `yaml:"timeout"`
}

// ProxyProtocol configures HAProxy's PROXY protocol on a tcp listener.
type ProxyProtocol struct {
	// Send is v1 or v2: the header sent to upstreams. Default: none.
	Send string `yaml:"send"`
	// Accept reads a header from connections whose source is one of
	// trusted_proxies (they must send one); others are not parsed.
	Accept bool `yaml:"accept"`
	// TrustedProxies are addresses or CIDR prefixes. Required with accept.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// Registry is the embedded registry's settings.
type Registry struct {
	// Enabled turns the embedded registry on or off. Default true when the
	// block is present.
	Enabled *bool `yaml:"enabled"`
	// Listen is its HTTP API's host:port. Default 127.0.0.1:8500.
	Listen string `yaml:"listen"`
	// ACLToken makes writes (and reads with acl_reads) require the token
	// in X-Consul-Token or Authorization: Bearer. Required when listen is
	// not a loopback address, unless insecure is true.
	ACLToken string `yaml:"acl_token"`
	// ACLTokenFile reads the token from a file instead.
	ACLTokenFile string `yaml:"acl_token_file"`
	// ACLReads makes reads require the token too.
	ACLReads bool `yaml:"acl_reads"`
	// Insecure allows a non-loopback listen address without a token.
	Insecure bool `yaml:"insecure"`
	// DataDir keeps a snapshot of the registrations so a restart keeps
	// them. Default: memory only.
	DataDir string `yaml:"data_dir"`
	// MaxBodyBytes caps a request body. Default 1MiB.
	MaxBodyBytes Size `yaml:"max_body_bytes"`
	// MaxStateBytes is the budget of the registry's state, counted as the
	// snapshot stores it (each check is charged 4KiB for its output); a
	// registration past it gets 507. Whatever it accepted loads again at
	// a restart. Default 64MiB; 64KiB to 1GiB.
	MaxStateBytes Size `yaml:"max_state_bytes"`
	// NodeName is the node name in its answers. Default: the host name.
	NodeName string `yaml:"node_name"`
}

// RegistryBackend is one external registry.
type RegistryBackend struct {
	// Kind is consul, etcd, dns or static. Required.
	Kind string `yaml:"kind"`
	// Address is consul's host:port (or http(s)://host:port), etcd's
	// endpoint, or the DNS server's host:port (default: /etc/resolv.conf).
	Address string `yaml:"address"`
	// Addresses lists several etcd endpoints.
	Addresses []string `yaml:"addresses"`
	// Token is consul's ACL token.
	Token string `yaml:"token"`
	// Username and Password authenticate to etcd.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// Datacenter is consul's datacenter. Default: the agent's.
	Datacenter string `yaml:"datacenter"`
	// Prefix is etcd's key prefix. Default /switchboard.
	Prefix string `yaml:"prefix"`
	// TLS configures a TLS connection to consul or etcd.
	TLS *ClientTLS `yaml:"tls"`
	// File is the static registry's YAML or JSON file, watched for changes.
	File string `yaml:"file"`
	// Record is dns's record type: srv (default) or a (A and AAAA).
	Record string `yaml:"record"`
	// Port is the port of instances found by record a. Required with it.
	Port int `yaml:"port"`
	// MinTTL and MaxTTL clamp how often DNS answers are refreshed.
	// Defaults 1s and 5m.
	MinTTL Duration `yaml:"min_ttl"`
	MaxTTL Duration `yaml:"max_ttl"`
}

// ClientTLS configures TLS to a registry, or to an upstream's endpoints
// (the upstream's tls block, docs/traffic.md "Upstream TLS").
type ClientTLS struct {
	// CAFile verifies the server; default: the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile present a client certificate.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name verified in the server's certificate.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify turns verification off (tests only).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// MinVersion is the lowest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string `yaml:"min_version"`
}

// Discovery tunes the discovery cache.
type Discovery struct {
	// CacheDir keeps the last good view of every service on disk and
	// loads it at start when a registry is unreachable. Default: off.
	CacheDir string `yaml:"cache_dir"`
	// EmptyGrace keeps a service's previous instances this long when the
	// registry suddenly reports none. Default 30s.
	EmptyGrace Duration `yaml:"empty_grace"`
}

// UpstreamDiscovery feeds an upstream's endpoints from a registry.
type UpstreamDiscovery struct {
	// Registry names an entry of registries, or "embedded". Required.
	Registry string `yaml:"registry"`
	// Service is the service name (for dns: the name to resolve). Required.
	Service string `yaml:"service"`
	// Tags: an instance must carry every one.
	Tags []string `yaml:"tags"`
	// PassingOnly lets only instances whose registry health is passing
	// take traffic; the others stay visible as unhealthy endpoints.
	// Default true.
	PassingOnly *bool `yaml:"passing_only"`
}

// TLS terminates TLS on a listener: its certificates (PEM files, watched
// and reloaded when they change), protocol versions and suites, client
// certificates and HSTS. Relative paths are relative to switchboard's
// working directory, not to the config file. Keys: docs/traffic.md,
// "Listener TLS".
type TLS struct {
	// CertFile holds the certificate chain, leaf first; KeyFile its
	// private key. The one-certificate form of certificates.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// Certificates are several certificates, chosen for each handshake by
	// the client's server name (SNI) against their DNS names: an exact
	// name before a wildcard (*.example.com), and the first certificate
	// when no name matches or the client sends none.
	Certificates []Certificate `yaml:"certificates"`
	// ACME gets the listener's certificates from an ACME CA (Let's
	// Encrypt by default) instead of files. Keys: config/acme.go.
	ACME *ACME `yaml:"acme"`
	// The keys below are in listener_tls.go.
	ListenerTLS `yaml:",inline"`
}

// ListenerTimeouts bound how long a client may take.
type ListenerTimeouts struct {
	// ReadHeader bounds reading a request's headers. Default 10s.
	ReadHeader Duration `yaml:"read_header"`
	// Idle bounds how long a keep-alive connection waits for its next
	// request. Default 60s.
	Idle Duration `yaml:"idle"`
	// ReadBody is the longest a read of a request body may wait for the
	// next bytes (nginx's client_body_timeout): a client that sends
	// nothing for this long gets 408 and its connection is closed. http
	// only. Default 30s.
	ReadBody Duration `yaml:"read_body"`
}

// Route sends matching requests to an upstream.
type Route struct {
	// Name identifies the route in metrics and logs. Default
	// "<listener>/<index>".
	Name string `yaml:"name"`
	// Match selects requests; every field set must match.
	Match Match `yaml:"match"`
	// Upstream names the upstream that serves the route. Required, unless
	// split is set or the route redirects.
	Upstream string `yaml:"upstream"`
	// Split shares the route's requests among several upstreams by weight
	// (docs/traffic.md, "Traffic split"). Exclusive with upstream.
	Split []SplitMember `yaml:"split"`
	// SplitSticky picks the split's member by a hash of a request key, so
	// that a client keeps one version; default a weighted random choice
	// per request.
	SplitSticky *SplitSticky `yaml:"split_sticky"`
	// Canary sends requests that opt in by a header or cookie to one
	// upstream, whatever the split chooses.
	Canary *Canary `yaml:"canary"`
	// Mirror sends a copy of a share of the requests to another upstream,
	// its answer discarded (docs/traffic.md, "Mirroring").
	Mirror *Mirror `yaml:"mirror"`
	// StickyCookie pins a client to the endpoint that answered it, by a
	// signed cookie the proxy sets; it wins over the upstream's own.
	StickyCookie *StickyCookie `yaml:"sticky_cookie"`
	// Timeout bounds the whole request, from routing to the last byte of
	// the response. Default 60s; 0 disables it (long-lived streams).
	Timeout *Duration `yaml:"timeout"`
	// BufferRequests, when set, reads each request body whole before an
	// endpoint is picked, so that a slow upload holds no upstream
	// connection, and keeps it for retries whatever its size.
	BufferRequests *BufferRequests `yaml:"buffer_requests"`
	// Compress, when set, compresses the route's responses with gzip or
	// zstd for the clients that accept them (Compress).
	Compress *Compress `yaml:"compress"`
	// Decompress decodes an upstream's gzip or zstd answer for a client
	// that does not accept its coding.
	Decompress bool `yaml:"decompress"`
	// Access allows and denies client addresses (checked first).
	Access *Access `yaml:"access"`
	// CORS is the route's cross-origin policy; the proxy answers its
	// preflight requests (checked after access).
	CORS *CORS `yaml:"cors"`
	// BasicAuth asks for a user name and password (checked after cors).
	BasicAuth *BasicAuth `yaml:"basic_auth"`
	// ForwardAuth asks an auth service about each request (checked after
	// basic_auth).
	ForwardAuth *ForwardAuth `yaml:"forward_auth"`
	// Rewrite changes the path and Host sent upstream (config/rewrite.go).
	Rewrite *Rewrite `yaml:"rewrite"`
	// RequestHeaders sets, adds and removes fields of the request sent
	// upstream; values may hold placeholders.
	RequestHeaders *HeaderRules `yaml:"request_headers"`
	// ResponseHeaders sets, adds and removes fields of the upstream's
	// response (not of the errors switchboard makes itself).
	ResponseHeaders *HeaderRules `yaml:"response_headers"`
	// Redirect answers matching requests with a redirect instead of
	// forwarding them; a route has either upstream or redirect.
	Redirect *Redirect `yaml:"redirect"`
	// Config holds the route's protection and retry settings: rate_limit,
	// concurrency, breaker, retry and fallback (pipeline.Config).
	pipeline.Config `yaml:",inline"`
}

// BufferRequests bounds the buffering of a route's request bodies: the
// first Memory bytes of a body are kept in memory, the rest in a temporary
// file (removed from the directory as soon as it is made, so nothing is
// left behind), and a body over Max gets 413.
type BufferRequests struct {
	// Memory is how much of a body is kept in memory. Default 64KiB.
	Memory Size `yaml:"memory"`
	// Max is the largest body accepted (the listener's max_body_bytes,
	// when lower, wins). Default 8MiB.
	Max Size `yaml:"max"`
	// Dir is where bodies larger than Memory are spilled. Default: the
	// system's temporary directory ($TMPDIR or /tmp).
	Dir string `yaml:"dir"`
}

// Match is a route's request matcher.
type Match struct {
	// Host matches the request's host (port ignored, case-insensitive).
	// A leading "*." matches any subdomain.
	Host string `yaml:"host"`
	// PathPrefix matches paths that start with it. Default "/".
	PathPrefix string `yaml:"path_prefix"`
	// Methods matches any of the listed methods. Default any.
	Methods []string `yaml:"methods"`
	// Headers matches requests carrying each header with exactly the value.
	Headers map[string]string `yaml:"headers"`
}

// Upstream is a named pool of endpoints.
type Upstream struct {
	// Config holds balance, targets, health, breaker and concurrency
	// (upstream.Config): how the upstream picks and judges its endpoints.
	upstream.Config `yaml:",inline"`
	// StickyCookie pins a client to the endpoint that answered it, by a
	// signed cookie the proxy sets (docs/traffic.md, "Sticky sessions").
	StickyCookie *StickyCookie `yaml:"sticky_cookie"`
	// Protocol to speak to the endpoints: http1 (default) or h2c
	// (cleartext HTTP/2, for gRPC), or https: TLS, with HTTP/2 or
	// HTTP/1.1 as the endpoint chooses by ALPN (the default when tls is
	// set). http1 with tls is HTTP/1.1 over TLS.
	Protocol string `yaml:"protocol"`
	// TLS speaks TLS to the endpoints: the CA that verifies them (default:
	// the system roots), a client certificate, the server name, the
	// lowest version. Optional with protocol https.
	TLS *ClientTLS `yaml:"tls"`
	// Discovery takes the endpoints from a registry instead of targets.
	Discovery *UpstreamDiscovery `yaml:"discovery"`
	// Timeouts for upstream connections.
	Timeouts UpstreamTimeouts `yaml:"timeouts"`
	// MaxIdlePerEndpoint caps idle keep-alive connections kept per endpoint.
	// Default 64; 0 keeps none, which is why it is a pointer.
	MaxIdlePerEndpoint *int `yaml:"max_idle_per_endpoint"`
	// IdleTimeout closes upstream connections idle for longer. Default 60s;
	// keep it below the backends' own keep-alive timeout.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxResponseHeaderBytes caps an endpoint's response header (status
	// line and fields, with any 1xx responses before it). Default 64KiB.
	// Over it the request fails with 502 upstream_error and the
	// connection is closed. With protocol h2c it caps the decoded header
	// list as HTTP/2 counts it (name and value plus 32 bytes a field).
	MaxResponseHeaderBytes Size `yaml:"max_response_header_bytes"`
}

// UpstreamTimeouts bound how long an upstream may take.
type UpstreamTimeouts struct {
	// Connect bounds dialing an endpoint. Default 2s.
	Connect Duration `yaml:"connect"`
	// ResponseHeader bounds the wait for the response header after the
	// request was sent. Default 30s.
	ResponseHeader Duration `yaml:"response_header"`
}

// Duration is a time.Duration written as a Go duration string ("250ms").
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Size is a byte count written as an integer or with a unit: 512, 64KiB,
// 1MiB, 1GiB (also KB/MB/GB as powers of 1000).
type Size int64
