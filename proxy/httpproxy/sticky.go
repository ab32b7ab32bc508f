package httpproxy

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/upstream"
)

// stickyCookie pins clients to endpoints of one upstream with a cookie the
// proxy sets (HAProxy's "cookie SRV insert"). The cookie's value is a
// token: the first 16 bytes of HMAC-SHA256(key, upstream NUL endpoint ID),
// base64url. It names the endpoint without showing its address, and
// cannot be made for an endpoint without the key; a value that is no
// current endpoint's token (forged, or of an endpoint that left) is
// ignored.
type stickyCookie struct {
	name  string
	attrs string // "; Path=/; Max-Age=3600; HttpOnly; Secure; SameSite=Lax"
	key   []byte
	up    *upstream.Upstream
	table atomic.Pointer[stickyTable]
}

// stickyTable is the tokens of one snapshot of the upstream's pool.
type stickyTable struct {
	version uint64
	byToken map[string]*endpoint.Endpoint
	tokenOf map[*endpoint.Endpoint]string
}

// processKey signs sticky cookies whose configuration gives no secret: one
// random key per process, kept across reloads.
var processKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
})

// newStickyCookie returns the sticky cookie cfg describes over pipe's
// upstream, or nil when cfg is nil.
func newStickyCookie(cfg *config.StickyCookie, pipe *pipeline.Route) *stickyCookie {
	if cfg == nil || pipe == nil {
		return nil
	}
	s := &stickyCookie{name: cfg.Name, key: cfg.Key(), up: pipe.Upstream()}
	if s.name == "" {
		s.name = config.DefaultStickyCookieName
	}
	if len(s.key) == 0 {
		s.key = processKey()
	}
	path := cfg.Path
	if path == "" {
		path = config.DefaultStickyCookiePath
	}
	attrs := "; Path=" + path
	if ttl := cfg.TTL.Std(); ttl > 0 {
		attrs += "; Max-Age=" + strconv.FormatInt(int64((ttl+999999999)/1e9), 10)
	}
	if cfg.HTTPOnly {
		attrs += "; HttpOnly"
	}
	if cfg.Secure {
		attrs += "; Secure"
	}
	switch cfg.SameSite {
	case "lax":
		attrs += "; SameSite=Lax"
	case "strict":
		attrs += "; SameSite=Strict"
	case "none":
		attrs += "; SameSite=None"
	}
	s.attrs = attrs
	return s
}

// tokens returns the tokens of the pool's current snapshot, made again
// when the snapshot changed.
func (s *stickyCookie) tokens() *stickyTable {
	snap := s.up.Pool().Snapshot()
	if t := s.table.Load(); t != nil && t.version == snap.Version {
		return t
	}
	t := &stickyTable{version: snap.Version, byToken: make(map[string]*endpoint.Endpoint, len(snap.All)),
		tokenOf: make(map[*endpoint.Endpoint]string, len(snap.All))}
	for _, ep := range snap.All {
		mac := hmac.New(sha256.New, s.key)
		mac.Write([]byte(s.up.Name()))
		mac.Write([]byte{0})
		mac.Write([]byte(ep.ID()))
		tok := base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
		t.byToken[tok] = ep
		t.tokenOf[ep] = tok
	}
	s.table.Store(t)
	return t
}

// endpoint returns the endpoint r's cookie names, or nil when it carries
// none that is valid.
func (s *stickyCookie) endpoint(r *http.Request) *endpoint.Endpoint {
	v, ok := cookieValue(r.Header, s.name)
	if !ok {
		return nil
	}
	return s.tokens().byToken[v]
}

// set adds the cookie naming ep to the response header h, unless the
// request's cookie already named it (had).
func (s *stickyCookie) set(h http.Header, ep, had *endpoint.Endpoint) {
	if ep == nil || ep == had {
		return
	}
	tok, ok := s.tokens().tokenOf[ep]
	if !ok {
		return // it left the pool meanwhile
	}
	h["Set-Cookie"] = append(h["Set-Cookie"], s.name+"="+tok+s.attrs)
}
