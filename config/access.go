package config

import (
	"bufio"
	"bytes"
	"fmt"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/switchboard-dev/switchboard/ratelimit"
)

// Access is a route's IP allow and deny lists. The client's address is the
// connection's peer, or, when the peer is one of the listener's
// trusted_proxies, the address X-Forwarded-For names (docs/traffic.md).
// A request from an address in deny, or, when allow is set, from one not
// in allow, gets 403.
type Access struct {
	// Allow lists the addresses and CIDR prefixes that may use the route.
	// Empty: every address not denied.
	Allow []string `yaml:"allow"`
	// Deny lists addresses and CIDR prefixes refused even when allow
	// matches them too: deny wins.
	Deny []string `yaml:"deny"`
}

// BasicAuth asks for a user name and password (RFC 7617), checked against
// bcrypt hashes ($2a$, $2b$ or $2y$, as htpasswd -B writes them).
type BasicAuth struct {
	// Realm names the protected space in the WWW-Authenticate challenge.
	// Default "switchboard".
	Realm string `yaml:"realm"`
	// Users maps user names to bcrypt hashes.
	Users map[string]string `yaml:"users"`
	// UsersFile is a file of "name:bcrypt-hash" lines (htpasswd -B);
	// blank lines and lines starting with # are skipped. It is read when
	// the configuration is loaded or reloaded. Relative paths are relative
	// to switchboard's working directory.
	UsersFile string `yaml:"users_file"`
	// KeepAuthorization sends the client's Authorization header on to the
	// upstream. Default false: the proxy removes it, so the upstream never
	// sees the password.
	KeepAuthorization bool `yaml:"keep_authorization"`
	// UserHeader, when set, names a request header that carries the
	// authenticated user's name to the upstream (a client's own value of
	// it is always removed).
	UserHeader string `yaml:"user_header"`

	// fileUsers are the users read from UsersFile when the configuration
	// was validated.
	fileUsers map[string]string
}

// AllUsers returns the users of Users and UsersFile together, name to
// bcrypt hash. A file's users are those read when the configuration was
// loaded. The map is new: the caller may keep it.
func (b *BasicAuth) AllUsers() map[string]string {
	m := make(map[string]string, len(b.Users)+len(b.fileUsers))
	for k, v := range b.fileUsers {
		m[k] = v
	}
	for k, v := range b.Users {
		m[k] = v
	}
	return m
}

// ForwardAuth asks an auth service about each request: the proxy sends it
// a GET carrying the chosen headers of the client's request and
// X-Forwarded-Method, -Proto, -Host, -Uri and -For. A 2xx answer lets the
// request through, with the answer's copy_response_headers set on it; any
// other answer goes back to the client as the auth service gave it.
type ForwardAuth struct {
	// URL is the auth service's http or https URL. Required.
	URL string `yaml:"url"`
	// Timeout bounds the whole exchange with the auth service; past it the
	// client gets 503 auth_unavailable. Default 5s.
	Timeout Duration `yaml:"timeout"`
	// CopyRequestHeaders are the client's request headers sent to the auth
	// service. Default: all of them (but the hop-by-hop ones and those
	// of a body, which is not sent).
	CopyRequestHeaders []string `yaml:"copy_request_headers"`
	// CopyResponseHeaders are the headers of a 2xx answer set on the
	// request to the upstream (X-User, X-Groups). A client's own values of
	// them are always removed, so that a client cannot pose as a user.
	CopyResponseHeaders []string `yaml:"copy_response_headers"`
	// MaxResponseBytes caps the body of an answer relayed to the client;
	// a longer one gets 502 auth_failed instead. Default 64KiB.
	MaxResponseBytes Size `yaml:"max_response_bytes"`
}

// CORS is a route's cross-origin resource sharing policy: the proxy
// answers preflight requests itself and adds the Access-Control-* headers
// to the answers of allowed origins, replacing any the upstream sent.
type CORS struct {
	// AllowOrigins are the origins allowed: "*" (any), exact origins
	// ("https://app.example.com", with a port when it is not the
	// scheme's default), or one-label-or-more wildcards
	// ("https://*.example.com"). Required.
	AllowOrigins []string `yaml:"allow_origins"`
	// AllowMethods are the methods a preflight may ask for. Default GET,
	// HEAD, POST.
	AllowMethods []string `yaml:"allow_methods"`
	// AllowHeaders are the request headers a preflight may ask for; "*"
	// allows any. Default none.
	AllowHeaders []string `yaml:"allow_headers"`
	// ExposeHeaders are the response headers scripts may read.
	ExposeHeaders []string `yaml:"expose_headers"`
	// AllowCredentials lets requests carry cookies and Authorization. Not
	// with origin "*".
	AllowCredentials bool `yaml:"allow_credentials"`
	// MaxAge is how long a browser may cache a preflight's answer. Default:
	// not sent (browsers keep it 5s).
	MaxAge Duration `yaml:"max_age"`
}

// Access-control defaults.
const (
	DefaultBasicAuthRealm       = "switchboard"
	DefaultForwardAuthTimeout   = Duration(5 * time.Second)
	DefaultForwardAuthMaxAnswer = 64 * KiB
)

// DefaultCORSMethods are the methods a CORS policy allows when it names
// none: the CORS-safelisted ones.
var DefaultCORSMethods = []string{"GET", "HEAD", "POST"}

// applyAccessDefaults fills in a route's access-control defaults.
func applyAccessDefaults(r *Route) {
	if b := r.BasicAuth; b != nil {
		setDefault(&b.Realm, DefaultBasicAuthRealm)
	}
	if f := r.ForwardAuth; f != nil {
		setDefault(&f.Timeout, DefaultForwardAuthTimeout)
		setDefault(&f.MaxResponseBytes, DefaultForwardAuthMaxAnswer)
	}
	if c := r.CORS; c != nil && len(c.AllowMethods) == 0 {
		c.AllowMethods = append([]string(nil), DefaultCORSMethods...)
	}
}

// checkPrefixes checks a list of addresses and prefixes named key.
func (v *validator) checkPrefixes(key string, list []string) {
	for i := range list {
		if _, err := ratelimit.ParsePrefix(list[i]); err != nil {
			v.errorf(&list[i], "%s[%d]: %v", key, i, err)
		}
	}
}

// checkTrustedProxies checks an http listener's trusted_proxies.
func (v *validator) checkTrustedProxies(l *Listener) {
	v.checkPrefixes("trusted_proxies", l.TrustedProxies)
}

// checkAccessControl checks a route's access, basic_auth, forward_auth
// and cors blocks.
func (v *validator) checkAccessControl(r *Route) {
	if a := r.Access; a != nil && !v.bad(a) {
		v.checkPrefixes("access.allow", a.Allow)
		v.checkPrefixes("access.deny", a.Deny)
		if len(a.Allow) == 0 && len(a.Deny) == 0 {
			v.keyErrorf(a, "access needs allow or deny (a list of addresses and CIDR prefixes)")
		}
	}
	if b := r.BasicAuth; b != nil && !v.bad(b) {
		v.checkBasicAuth(b)
	}
	if f := r.ForwardAuth; f != nil && !v.bad(f) {
		v.checkForwardAuth(f)
	}
	if c := r.CORS; c != nil && !v.bad(c) {
		v.checkCORS(c)
	}
}

func (v *validator) checkBasicAuth(b *BasicAuth) {
	for _, c := range []byte(b.Realm) {
		if c < ' ' || c == 0x7f || c == '"' || c == '\\' {
			v.errorf(&b.Realm, `basic_auth.realm %q may not contain quotes, backslashes or control characters`, b.Realm)
			break
		}
	}
	if b.UserHeader != "" {
		if !isToken(b.UserHeader) {
			v.errorf(&b.UserHeader, "basic_auth.user_header %q is not a valid header name", b.UserHeader)
		} else {
			b.UserHeader = textproto.CanonicalMIMEHeaderKey(b.UserHeader)
		}
	}
	for _, name := range sortedKeys(b.Users) {
		at := entry(b.Users, name)
		if err := checkUserName(name); err != nil {
			v.keyErrorf(at, "basic_auth.users: %v", err)
		}
		if err := checkBcrypt(b.Users[name]); err != nil {
			v.errorf(at, "basic_auth.users: the hash of %q %v", name, err)
		}
	}
	if b.UsersFile != "" && !v.bad(&b.UsersFile) {
		data, err := v.readFile(b.UsersFile)
		if err != nil {
			v.errorf(&b.UsersFile, "basic_auth.users_file %q: %v", b.UsersFile, err)
			return
		}
		users, err := parseUsersFile(b.UsersFile, data)
		if err != nil {
			v.errorf(&b.UsersFile, "basic_auth.users_file %v", err)
			return
		}
		for _, name := range sortedKeys(b.Users) {
			if _, dup := users[name]; dup {
				v.keyErrorf(entry(b.Users, name), "basic_auth.users: %q is also a user of users_file %q; name each user once", name, b.UsersFile)
			}
		}
		b.fileUsers = users
	}
	if len(b.Users) == 0 && b.UsersFile == "" && !v.bad(&b.Users) {
		v.keyErrorf(b, "basic_auth needs users or users_file")
	}
}

// checkUserName reports a user name that Basic authentication cannot
// carry: empty, or with a colon or a control character.
func checkUserName(name string) error {
	if name == "" {
		return fmt.Errorf("a user name must not be empty")
	}
	for _, c := range []byte(name) {
		if c == ':' || c < ' ' || c == 0x7f {
			return fmt.Errorf("user name %q may not contain a colon or a control character", name)
		}
	}
	return nil
}

// checkBcrypt reports a hash that is not a bcrypt hash the proxy can
// check. Its error reads as the end of a sentence about the hash.
func checkBcrypt(hash string) error {
	if !strings.HasPrefix(hash, "$2a$") && !strings.HasPrefix(hash, "$2b$") && !strings.HasPrefix(hash, "$2y$") {
		return fmt.Errorf("is not a bcrypt hash (it starts $2a$, $2b$ or $2y$; make one with htpasswd -nB NAME)")
	}
	if _, err := bcrypt.Cost([]byte(hash)); err != nil {
		return fmt.Errorf("is not a valid bcrypt hash: %v", strings.TrimPrefix(err.Error(), "crypto/bcrypt: "))
	}
	return nil
}

// parseUsersFile parses a users file's "name:hash" lines. Its error names
// the file and line.
func parseUsersFile(file string, data []byte) (map[string]string, error) {
	users := map[string]string{}
	lines := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want name:bcrypt-hash", file, n)
		}
		if err := checkUserName(name); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, n, err)
		}
		if err := checkBcrypt(hash); err != nil {
			return nil, fmt.Errorf("%s:%d: the hash of %q %v", file, n, name, err)
		}
		if first, dup := lines[name]; dup {
			return nil, fmt.Errorf("%s:%d: user %q again (first at line %d)", file, n, name, first)
		}
		users[name], lines[name] = hash, n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%q: %v", file, err)
	}
	return users, nil
}

func (v *validator) checkForwardAuth(f *ForwardAuth) {
	switch u, err := url.Parse(f.URL); {
	case f.URL == "":
		v.keyErrorf(f, "forward_auth.url (the auth service's http:// or https:// URL) is required")
	case err != nil:
		v.errorf(&f.URL, "forward_auth.url %q is not a URL: %v", f.URL, errUnwrapURL(err))
	case u.Scheme != "http" && u.Scheme != "https":
		v.errorf(&f.URL, "forward_auth.url %q must start with http:// or https://", f.URL)
	case u.Host == "":
		v.errorf(&f.URL, "forward_auth.url %q has no host", f.URL)
	case u.Fragment != "":
		v.errorf(&f.URL, "forward_auth.url %q must not have a #fragment", f.URL)
	}
	if f.Timeout < 0 || f.Timeout == 0 && v.present(&f.Timeout) {
		v.errorf(&f.Timeout, "forward_auth.timeout must be positive, got %v", f.Timeout.Std())
	}
	if f.MaxResponseBytes < 0 {
		v.errorf(&f.MaxResponseBytes, "forward_auth.max_response_bytes must not be negative")
	}
	v.checkHeaderNames("forward_auth.copy_request_headers", f.CopyRequestHeaders, false)
	v.checkHeaderNames("forward_auth.copy_response_headers", f.CopyResponseHeaders, false)
}

// errUnwrapURL drops url.Parse's repetition of the URL.
func errUnwrapURL(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// checkHeaderNames checks a list of header names and canonicalizes them;
// star allows the entry "*".
func (v *validator) checkHeaderNames(key string, list []string, star bool) {
	for i, h := range list {
		switch {
		case star && h == "*":
		case !isToken(h):
			v.errorf(&list[i], "%s[%d]: %q is not a valid header name", key, i, h)
		default:
			list[i] = textproto.CanonicalMIMEHeaderKey(h)
		}
	}
}

func (v *validator) checkCORS(c *CORS) {
	if len(c.AllowOrigins) == 0 && !v.bad(&c.AllowOrigins) {
		v.keyErrorf(c, `cors.allow_origins is required ("*", or origins such as https://app.example.com)`)
	}
	for i, o := range c.AllowOrigins {
		if o == "*" {
			if c.AllowCredentials {
				v.errorf(&c.AllowOrigins[i], `cors.allow_origins: "*" cannot go with allow_credentials: true (browsers refuse it); list the origins`)
			}
			continue
		}
		norm, err := ParseOrigin(o)
		if err != nil {
			v.errorf(&c.AllowOrigins[i], "cors.allow_origins[%d]: %v", i, err)
			continue
		}
		c.AllowOrigins[i] = norm
	}
	for i, m := range c.AllowMethods {
		if !isToken(m) {
			v.errorf(&c.AllowMethods[i], "cors.allow_methods[%d]: %q is not a valid HTTP method", i, m)
			continue
		}
		c.AllowMethods[i] = strings.ToUpper(m)
	}
	v.checkHeaderNames("cors.allow_headers", c.AllowHeaders, true)
	v.checkHeaderNames("cors.expose_headers", c.ExposeHeaders, true)
	if c.AllowCredentials {
		for i, h := range c.ExposeHeaders {
			if h == "*" {
				v.errorf(&c.ExposeHeaders[i], `cors.expose_headers: "*" means the header named "*" to browsers when allow_credentials is true; list the headers`)
			}
		}
	}
	if c.MaxAge < 0 {
		v.errorf(&c.MaxAge, "cors.max_age must not be negative")
	}
}

// ParseOrigin checks a CORS origin pattern, scheme://host[:port] with
// host optionally "*.suffix", and returns it lower-cased with the
// scheme's default port left out, the way browsers send Origin.
func ParseOrigin(o string) (string, error) {
	scheme, rest, ok := strings.Cut(o, "://")
	if !ok || scheme == "" {
		return "", fmt.Errorf("%q is not an origin (scheme://host[:port], such as https://app.example.com)", o)
	}
	scheme = strings.ToLower(scheme)
	if strings.ContainsAny(rest, "/?#@") {
		return "", fmt.Errorf("%q is not an origin: leave out any path, query or user (scheme://host[:port])", o)
	}
	host, port := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.HasSuffix(rest, "]") {
		host, port = rest[:i], rest[i+1:]
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%q has port %q, not 1-65535", o, port)
		}
	}
	host = strings.ToLower(host)
	name := strings.TrimPrefix(host, "*.")
	switch {
	case strings.Contains(name, "*"):
		return "", fmt.Errorf(`%q: "*" may only be the first label of the host, as in https://*.example.com`, o)
	case !validHost(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")):
		return "", fmt.Errorf("%q has an invalid host %q", o, host)
	}
	if port == "443" && scheme == "https" || port == "80" && scheme == "http" {
		port = ""
	}
	if port != "" {
		return scheme + "://" + host + ":" + port, nil
	}
	return scheme + "://" + host, nil
}
