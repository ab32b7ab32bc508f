package httpproxy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/crypto/bcrypt"

	"github.com/switchboard-dev/switchboard/config"
)

// basicAuth is a route's basic_auth: its users' bcrypt hashes, and a
// cache of the credentials that recently matched.
//
// bcrypt is slow on purpose (some 50-100ms of a core at cost 10), so the
// proxy does not run it per request: a keep-alive client sends the same
// Authorization on every request, and credentials that matched are kept
// (as a salted SHA-256 of name and password, never the password) for
// credTTL, up to credCacheSize of them per route; a reload starts afresh.
// Checks that do run bcrypt share bcryptSlots, half the cores, process
// wide: a flood of wrong passwords queues for them (up to bcryptWait, then
// 503 auth_busy) instead of taking every core from the traffic.
type basicAuth struct {
	users      map[string][]byte
	dummy      []byte   // a hash checked for unknown users, so they take as long
	challenge  []string // WWW-Authenticate
	keep       bool
	userHeader string
	// userHeaders is userHeader alone, for dropVouched.
	userHeaders []string
	cache       credCache
}

const (
	credCacheSize = 4096
	credTTL       = 5 * time.Minute
	bcryptWait    = 2 * time.Second
	// maxCredentials bounds a decoded user:password (bcrypt reads 72
	// bytes of a password at most).
	maxCredentials = 256
)

// bcryptSlots bound the bcrypt checks that run at once, process wide.
var bcryptSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))

// bcryptCompare is bcrypt's check; a test may count its calls.
var bcryptCompare = bcrypt.CompareHashAndPassword

func newBasicAuth(c *config.BasicAuth) *basicAuth {
	b := &basicAuth{
		users:      map[string][]byte{},
		challenge:  list1(`Basic realm="` + c.Realm + `", charset="UTF-8"`),
		keep:       c.KeepAuthorization,
		userHeader: c.UserHeader,
	}
	if b.userHeader != "" {
		b.userHeaders = []string{b.userHeader}
	}
	cost := 0
	for name, hash := range c.AllUsers() {
		b.users[name] = []byte(hash)
		if n, err := bcrypt.Cost([]byte(hash)); err == nil {
			cost = max(cost, n)
		}
	}
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	// As slow as the slowest user's hash.
	b.dummy = dummyHash(cost)
	b.cache.m = map[[32]byte]int64{}
	rand.Read(b.cache.salt[:])
	return b
}

var dummyHashes struct {
	sync.Mutex
	m map[int][]byte
}

// dummyHash returns a bcrypt hash of cost made once per process.
func dummyHash(cost int) []byte {
	dummyHashes.Lock()
	defer dummyHashes.Unlock()
	if h, ok := dummyHashes.m[cost]; ok {
		return h
	}
	h, err := bcrypt.GenerateFromPassword([]byte("switchboard: no such user"), cost)
	if err != nil {
		panic("httpproxy: bcrypt: " + err.Error())
	}
	if dummyHashes.m == nil {
		dummyHashes.m = map[int][]byte{}
	}
	dummyHashes.m[cost] = h
	return h
}

// checkBasicAuth checks r's credentials against route rt's basic auth b.
// It returns 0 when they are good (and sets b's user header), or the
// status it answered with: 401 with a challenge, or 503 auth_busy.
func (h *Handler) checkBasicAuth(w http.ResponseWriter, r *http.Request, rt *route, b *basicAuth, now time.Time) int {
	var buf [maxCredentials]byte
	user, pass, ok := parseBasic(r.Header["Authorization"], &buf)
	if !ok {
		return b.refuse(w, "credentials required")
	}
	key := b.cache.key(user, pass)
	if !b.cache.has(key, now) {
		hash, known := b.users[string(user)]
		if !known {
			hash = b.dummy
		}
		if !acquireBcrypt(r) {
			w.Header()["Retry-After"] = valOne
			WriteError(w, http.StatusServiceUnavailable, CodeAuthBusy, "too many passwords are being checked; try again")
			return http.StatusServiceUnavailable
		}
		rt.metrics.BcryptCheck()
		// A copy: passed to a function variable, buf itself would escape
		// to the heap on every request, the cached ones too.
		err := bcryptCompare(hash, bytes.Clone(pass))
		<-bcryptSlots
		if err != nil || !known {
			return b.refuse(w, "wrong user name or password")
		}
		b.cache.add(key, now)
	}
	if b.userHeader != "" {
		dropVouched(r.Header, b.userHeaders)
		r.Header[b.userHeader] = []string{string(user)}
	}
	return 0
}

var valOne = []string{"1"}

func (b *basicAuth) refuse(w http.ResponseWriter, msg string) int {
	w.Header()["Www-Authenticate"] = b.challenge
	WriteError(w, http.StatusUnauthorized, CodeUnauthorized, msg)
	return http.StatusUnauthorized
}

// acquireBcrypt takes a bcrypt slot, waiting up to bcryptWait or until
// r's client goes; false if it got none.
func acquireBcrypt(r *http.Request) bool {
	select {
	case bcryptSlots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(bcryptWait)
	defer t.Stop()
	select {
	case bcryptSlots <- struct{}{}:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return false
}

// parseBasic decodes the one Authorization: Basic header of auth into buf
// and returns the user name and password, which point into buf.
func parseBasic(auth []string, buf *[maxCredentials]byte) (user, pass []byte, ok bool) {
	if len(auth) != 1 {
		return nil, nil, false
	}
	const prefix = "Basic "
	v := auth[0]
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return nil, nil, false
	}
	v = strings.TrimLeft(v[len(prefix):], " ")
	if base64.StdEncoding.DecodedLen(len(v)) > len(buf) {
		return nil, nil, false
	}
	// Decoded straight from the header's bytes, which it only reads.
	n, err := base64.StdEncoding.Decode(buf[:], unsafe.Slice(unsafe.StringData(v), len(v)))
	if err != nil {
		return nil, nil, false
	}
	cred := buf[:n]
	i := bytes.IndexByte(cred, ':')
	if i < 0 {
		return nil, nil, false
	}
	return cred[:i], cred[i+1:], true
}

// credCache holds the keys of credentials that matched, with when they
// stop counting (Unix nanoseconds).
type credCache struct {
	mu   sync.Mutex
	salt [16]byte
	m    map[[32]byte]int64
}

// key is the salted SHA-256 of user and pass, the user's length first:
// a separator alone would let user "a\x00b" with password "c" pass as
// user "a" with password "b\x00c" (a name or password may hold any
// byte but the colon).
func (c *credCache) key(user, pass []byte) [32]byte {
	var buf [len(c.salt) + 2 + maxCredentials]byte
	n := copy(buf[:], c.salt[:])
	buf[n], buf[n+1] = byte(len(user)>>8), byte(len(user))
	n += 2
	n += copy(buf[n:], user)
	n += copy(buf[n:], pass)
	return sha256.Sum256(buf[:n])
}

func (c *credCache) has(key [32]byte, now time.Time) bool {
	c.mu.Lock()
	exp, ok := c.m[key]
	c.mu.Unlock()
	return ok && now.UnixNano() < exp
}

// add keeps key until now+credTTL. A full cache first drops what has
// expired, then, if that freed nothing, an entry at random.
func (c *credCache) add(key [32]byte, now time.Time) {
	t := now.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= credCacheSize {
		for k, exp := range c.m {
			if exp <= t {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < credCacheSize {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = t + int64(credTTL)
}
