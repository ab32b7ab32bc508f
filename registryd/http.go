package registryd

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/internal/rebind"
)

// Blocking query limits (Consul docs, features/blocking: "wait ... is
// limited to 10 minutes. If not set, the wait time defaults to 5 minutes
// ... A small random amount of additional wait time is added to the
// supplied maximum wait time to spread out the wake up time of any
// concurrent requests. This adds up to wait / 16 additional time").
const (
	defaultWait = 5 * time.Minute
	maxWait     = 10 * time.Minute
	// maxBlocking bounds blocking queries in flight; more get 429.
	maxBlocking = 16384
	// maxCachedQueries bounds the encoded answers kept per service (one per
	// distinct ?tag/?passing combination).
	maxCachedQueries = 64
)

// route is one supported endpoint. A path ending in "/" takes the rest of
// the URL path as its argument (a service or check ID, a service name).
type route struct {
	method string
	path   string
	write  bool
	h      func(w http.ResponseWriter, r *http.Request, arg string)
	// legacyGET also accepts GET for this write, as Consul did before 1.0:
	// python-consul 0.7.1 (Debian's python3-consul) still sends GET for
	// deregister and the TTL updates.
	legacyGET bool
}

func (s *Server) routes() []route {
	return []route{
		{method: http.MethodPut, path: "/v1/agent/service/register", write: true, h: s.handleRegister},
		{method: http.MethodPut, path: "/v1/agent/service/deregister/", write: true, h: s.handleDeregister, legacyGET: true},
		{method: http.MethodPut, path: "/v1/agent/check/pass/", write: true, h: s.handleTTL(statusPassing), legacyGET: true},
		{method: http.MethodPut, path: "/v1/agent/check/warn/", write: true, h: s.handleTTL(statusWarning), legacyGET: true},
		{method: http.MethodPut, path: "/v1/agent/check/fail/", write: true, h: s.handleTTL(statusCritical), legacyGET: true},
		{method: http.MethodPut, path: "/v1/agent/check/update/", write: true, h: s.handleCheckUpdate},
		{method: http.MethodGet, path: "/v1/agent/services", h: s.handleAgentServices},
		{method: http.MethodGet, path: "/v1/agent/service/", h: s.handleAgentService},
		{method: http.MethodGet, path: "/v1/agent/checks", h: s.handleAgentChecks},
		{method: http.MethodGet, path: "/v1/health/service/", h: s.handleHealthService},
		{method: http.MethodGet, path: "/v1/catalog/services", h: s.handleCatalogServices},
		{method: http.MethodGet, path: "/v1/catalog/service/", h: s.handleCatalogService},
		{method: http.MethodGet, path: "/v1/status/leader", h: s.handleStatusLeader},
		{method: http.MethodGet, path: "/v1/status/peers", h: s.handleStatusPeers},
	}
}

func (s *Server) newHandler() http.Handler {
	routes := s.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if s.cfg.ACLToken == "" && !s.hostAllowed(r.Host) {
			names := "an IP address or localhost"
			if s.listenHost != "" && !rebind.IsIPOrLocalhost(s.listenHost) {
				names = fmt.Sprintf("an IP address, localhost or %s", s.listenHost)
			}
			textError(w, http.StatusForbidden, fmt.Sprintf("Host %q is refused: without an acl_token the registry answers only requests addressed to %s, as protection against DNS rebinding; address it by one of those, or set acl_token", r.Host, names))
			return
		}
		var allowed []string
		for _, rt := range routes {
			var arg string
			if strings.HasSuffix(rt.path, "/") {
				rest, ok := strings.CutPrefix(path, rt.path)
				if !ok {
					continue
				}
				arg = rest
			} else if path != rt.path {
				continue
			}
			// An exact route shadows a prefix route for the same path
			// (GET /v1/agent/service/register is not a service named
			// "register").
			if strings.HasSuffix(rt.path, "/") && isExactRoute(routes, path) {
				continue
			}
			legacy := rt.legacyGET && r.Method == http.MethodGet
			if r.Method != rt.method && !legacy && !(r.Method == http.MethodHead && rt.method == http.MethodGet) {
				allowed = append(allowed, rt.method)
				continue
			}
			if rt.write && rebind.FromBrowser(r) {
				// No client library sends these headers, and a web page must
				// not change the registry through its visitor's browser: a
				// GET write is what any page can make a browser send to
				// 127.0.0.1 (the reason Consul 1.0 moved writes to PUT), and
				// a same-origin PUT is what a page on a rebound DNS name can
				// send without a CORS preflight.
				if legacy {
					textError(w, http.StatusForbidden, fmt.Sprintf("GET %s from a browser is refused: use PUT", path))
				} else {
					textError(w, http.StatusForbidden, fmt.Sprintf("%s %s from a browser is refused: the registry takes writes from HTTP clients, not web pages (the request has an Origin, Referer or Sec-Fetch-Site header)", r.Method, path))
				}
				return
			}
			if !s.authorize(w, r, rt.write) {
				return
			}
			if rt.write {
				r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
			}
			rt.h(w, r, arg)
			return
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			textError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, path, strings.Join(allowed, ", ")))
			return
		}
		textError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not supported by the embedded registry (switchboard registryd implements Consul's agent service/check, health/service, catalog/services, catalog/service and status endpoints; see docs/registry.md)", r.Method, path))
	})
}

// hostAllowed reports whether a request addressed to host (the Host
// header) may be answered without an ACL token (see package rebind).
func (s *Server) hostAllowed(host string) bool { return rebind.HostAllowed(host, s.listenHost) }

func isExactRoute(routes []route, path string) bool {
	for _, rt := range routes {
		if !strings.HasSuffix(rt.path, "/") && rt.path == path {
			return true
		}
	}
	return false
}

func textError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
}

// constantTimeCompare is subtle.ConstantTimeCompare; a variable so that a
// test can prove the token check goes through it.
var constantTimeCompare = subtle.ConstantTimeCompare

// tokenMatches compares a presented token with the configured one in time
// that depends on neither: both are hashed to 32 bytes first, so not even
// the length leaks, and the digests are compared with
// subtle.ConstantTimeCompare.
func tokenMatches(got, want string) bool {
	g := sha256.Sum256([]byte(got))
	w := sha256.Sum256([]byte(want))
	return constantTimeCompare(g[:], w[:]) == 1
}

// requestToken finds the ACL token where Consul clients send it (Consul
// docs, api-docs/api-structure#authentication: the X-Consul-Token header,
// "Authorization: Bearer <token>", or the deprecated ?token= parameter).
func requestToken(r *http.Request) string {
	if t := r.Header.Get("X-Consul-Token"); t != "" {
		return t
	}
	if a := r.Header.Get("Authorization"); a != "" {
		if scheme, tok, ok := strings.Cut(a, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	return r.URL.Query().Get("token")
}

// authorize enforces the ACL token on writes, and on reads with ACLReads.
// The 403 bodies are Consul's: "ACL not found" for an unknown token,
// "Permission denied" for none.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, write bool) bool {
	if s.cfg.ACLToken == "" || (!write && !s.cfg.ACLReads) {
		return true
	}
	tok := requestToken(r)
	switch {
	case tok == "":
		perm := "service:read"
		if write {
			perm = "service:write"
		}
		textError(w, http.StatusForbidden, fmt.Sprintf("Permission denied: anonymous token lacks permission '%s'. The anonymous token is used implicitly when a request does not specify a token.", perm))
		return false
	case !tokenMatches(tok, s.cfg.ACLToken):
		textError(w, http.StatusForbidden, "ACL not found")
		return false
	}
	return true
}

// readBody reads a capped body; over the cap it answers 413.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			textError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body too large: the limit is %d bytes", mbe.Limit))
			return nil, false
		}
		textError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return nil, false
	}
	return b, true
}

// writeError maps registry errors to Consul's status codes.
func writeError(w http.ResponseWriter, err error) {
	var fe *fieldError
	switch {
	case errors.As(err, &fe):
		textError(w, http.StatusBadRequest, "Invalid request: "+err.Error())
	case errors.Is(err, errUnknownService), errors.Is(err, errUnknownCheck):
		textError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errNotTTL):
		textError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errFull), errors.Is(err, errOverBudget):
		textError(w, http.StatusInsufficientStorage, err.Error())
	case errors.Is(err, errClosed):
		textError(w, http.StatusServiceUnavailable, "registry is shutting down")
	default:
		textError(w, http.StatusInternalServerError, err.Error())
	}
}

func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	var b []byte
	var err error
	_, pretty := r.URL.Query()["pretty"]
	if raw, ok := v.(json.RawMessage); ok {
		// Already encoded (and shared with other requests): write as is.
		b = raw
		if pretty {
			var buf bytes.Buffer
			if err = json.Indent(&buf, raw, "", "    "); err == nil {
				b = buf.Bytes()
			}
		}
	} else if pretty {
		b, err = json.MarshalIndent(v, "", "    ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		textError(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// checkDC refuses a datacenter other than ours, as Consul does for one it
// cannot reach.
func (s *Server) checkDC(w http.ResponseWriter, r *http.Request) bool {
	if dc := r.URL.Query().Get("dc"); dc != "" && dc != s.datacenter {
		textError(w, http.StatusInternalServerError, fmt.Sprintf("No path to datacenter: the embedded registry serves only %q", s.datacenter))
		return false
	}
	if r.URL.Query().Has("filter") {
		textError(w, http.StatusBadRequest, "filter: filter expressions are not supported by the embedded registry; use ?tag and ?passing")
		return false
	}
	return true
}

// handleRegister implements PUT /v1/agent/service/register
// (developer.hashicorp.com/consul/api-docs/agent/service#register-service),
// with ?replace-existing-checks. The whole definition is validated before
// anything is stored: a bad one is a 400 naming the field and no change.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request, _ string) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	def, err := decodeService(body)
	if err != nil {
		writeError(w, err)
		return
	}
	replace := queryFlag(r, "replace-existing-checks")
	if err := s.register(def, replace); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// queryFlag reads a Consul boolean parameter: present without a value, or
// any value but "false"/"0".
func queryFlag(r *http.Request, name string) bool {
	v, ok := r.URL.Query()[name]
	if !ok {
		return false
	}
	return len(v) == 0 || (v[0] != "false" && v[0] != "0")
}

// handleDeregister implements PUT /v1/agent/service/deregister/:service_id
// (developer.hashicorp.com/consul/api-docs/agent/service#deregister-service).
// An unknown ID is a 404, as in Consul.
func (s *Server) handleDeregister(w http.ResponseWriter, r *http.Request, id string) {
	if id == "" {
		textError(w, http.StatusBadRequest, "Missing service ID")
		return
	}
	if err := s.deregister(id, "deregistered over HTTP"); err != nil {
		if errors.Is(err, errUnknownService) {
			textError(w, http.StatusNotFound, fmt.Sprintf("Unknown service ID %q. Ensure that the service ID is passed, not the service name.", id))
			return
		}
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleTTL implements PUT /v1/agent/check/pass|warn|fail/:check_id?note=
// (developer.hashicorp.com/consul/api-docs/agent/check#ttl-check-pass and
// the warn and fail variants): the note becomes the check's output.
func (s *Server) handleTTL(status string) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, r *http.Request, id string) {
		if id == "" {
			textError(w, http.StatusBadRequest, "Missing check ID")
			return
		}
		if err := s.updateTTL(id, status, r.URL.Query().Get("note")); err != nil {
			if errors.Is(err, errUnknownCheck) {
				textError(w, http.StatusNotFound, fmt.Sprintf("Unknown check ID %q. Ensure that the check ID is passed, not the check name.", id))
				return
			}
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

// handleCheckUpdate implements PUT /v1/agent/check/update/:check_id with the
// body {"Status": ..., "Output": ...}
// (developer.hashicorp.com/consul/api-docs/agent/check#ttl-check-update).
func (s *Server) handleCheckUpdate(w http.ResponseWriter, r *http.Request, id string) {
	if id == "" {
		textError(w, http.StatusBadRequest, "Missing check ID")
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	status, output, err := decodeCheckUpdate(body)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.updateTTL(id, status, output); err != nil {
		if errors.Is(err, errUnknownCheck) {
			textError(w, http.StatusNotFound, fmt.Sprintf("Unknown check ID %q. Ensure that the check ID is passed, not the check name.", id))
			return
		}
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleAgentServices implements GET /v1/agent/services
// (developer.hashicorp.com/consul/api-docs/agent/service#list-services): a
// map from service ID to the service.
func (s *Server) handleAgentServices(w http.ResponseWriter, r *http.Request, _ string) {
	if !s.checkDC(w, r) {
		return
	}
	s.mu.RLock()
	out := make(map[string]*agentService, len(s.services))
	for id, ss := range s.services {
		out[id] = s.agentServiceLocked(ss, false)
	}
	s.mu.RUnlock()
	s.writeJSON(w, r, out)
}

// handleAgentService implements GET /v1/agent/service/:service_id
// (developer.hashicorp.com/consul/api-docs/agent/service#get-service-configuration),
// without hash-based blocking.
func (s *Server) handleAgentService(w http.ResponseWriter, r *http.Request, id string) {
	if id == "" {
		textError(w, http.StatusBadRequest, "Missing service ID")
		return
	}
	s.mu.RLock()
	ss := s.services[id]
	var out *agentService
	if ss != nil {
		out = s.agentServiceLocked(ss, false)
	}
	s.mu.RUnlock()
	if out == nil {
		textError(w, http.StatusNotFound, fmt.Sprintf("unknown service ID: %s", id))
		return
	}
	s.writeJSON(w, r, out)
}

// handleAgentChecks implements GET /v1/agent/checks
// (developer.hashicorp.com/consul/api-docs/agent/check#list-checks): a map
// from check ID to the check.
func (s *Server) handleAgentChecks(w http.ResponseWriter, r *http.Request, _ string) {
	if !s.checkDC(w, r) {
		return
	}
	s.mu.RLock()
	out := make(map[string]*healthCheck, len(s.checks))
	for id, c := range s.checks {
		out[id] = s.healthCheckLocked(c, false)
	}
	s.mu.RUnlock()
	s.writeJSON(w, r, out)
}

// handleHealthService implements GET /v1/health/service/:service
// (developer.hashicorp.com/consul/api-docs/health#list-service-instances-for-service)
// with ?passing, repeatable ?tag and blocking ?index/?wait: X-Consul-Index
// is the service's own index, so changes to other services neither wake
// this query nor move its index.
func (s *Server) handleHealthService(w http.ResponseWriter, r *http.Request, name string) {
	if !s.checkService(w, r, name) {
		return
	}
	tags, ok := queryTags(w, r)
	if !ok {
		return
	}
	passing := queryFlag(r, "passing")
	var out json.RawMessage
	s.blockingQuery(w, r, func() (uint64, <-chan struct{}) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		idx, ch := s.nameIndexLocked(name)
		out = s.healthJSONLocked(name, tags, passing)
		return idx, ch
	}, func() any { return out })
}

// healthJSONLocked is the encoded body of GET /v1/health/service/:name.
// It is built once per service, filter and index and shared: when a change
// wakes a thousand watchers of one service, one of them encodes the answer
// and the others reuse it. Any change to the service drops the cache.
func (s *Server) healthJSONLocked(name string, tags []string, passing bool) json.RawMessage {
	ns := s.names[name]
	if ns == nil {
		return json.RawMessage("[]")
	}
	key := healthCacheKey(tags, passing)
	ns.cacheMu.Lock()
	defer ns.cacheMu.Unlock()
	if b, ok := ns.cache[key]; ok {
		return b
	}
	b, err := json.Marshal(s.healthEntriesLocked(name, tags, passing))
	if err != nil {
		// Cannot happen for these types; answer without caching.
		return json.RawMessage("[]")
	}
	if ns.cache == nil || len(ns.cache) >= maxCachedQueries {
		ns.cache = map[string]json.RawMessage{}
	}
	ns.cache[key] = b
	return b
}

// healthCacheKey names one ?passing/?tag combination in the shared answer
// cache. It must be injective: two queries with different answers must
// never share a key, or one request could plant its answer for another.
// Each tag is written Go-quoted (strconv.Quote), which is self-delimiting
// whatever bytes the tag holds, after a fixed marker for ?passing.
func healthCacheKey(tags []string, passing bool) string {
	b := make([]byte, 0, 16*len(tags)+1)
	if passing {
		b = append(b, 'p')
	} else {
		b = append(b, 'a')
	}
	for _, t := range tags {
		b = strconv.AppendQuote(b, t)
	}
	return string(b)
}

// queryTags reads the repeatable ?tag parameter. A tag with a control
// character cannot be asked for: it is a 400 naming the parameter.
func queryTags(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	tags := r.URL.Query()["tag"]
	for i, t := range tags {
		if !utf8.ValidString(t) || strings.ContainsFunc(t, unicode.IsControl) {
			textError(w, http.StatusBadRequest, fmt.Sprintf("tag: %q (tag #%d) contains a control character or invalid UTF-8", t, i+1))
			return nil, false
		}
	}
	return tags, true
}

// handleCatalogServices implements GET /v1/catalog/services
// (developer.hashicorp.com/consul/api-docs/catalog#list-services): a map
// from service name to the union of its instances' tags, blocking on the
// catalog index (registrations and removals, not health changes).
func (s *Server) handleCatalogServices(w http.ResponseWriter, r *http.Request, _ string) {
	if !s.checkDC(w, r) {
		return
	}
	var out map[string][]string
	s.blockingQuery(w, r, func() (uint64, <-chan struct{}) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		out = s.catalogLocked()
		return s.catalogIndex, s.catalogCh
	}, func() any { return out })
}

// handleCatalogService implements GET /v1/catalog/service/:service
// (developer.hashicorp.com/consul/api-docs/catalog#list-nodes-for-service)
// with repeatable ?tag and blocking queries.
func (s *Server) handleCatalogService(w http.ResponseWriter, r *http.Request, name string) {
	if !s.checkService(w, r, name) {
		return
	}
	tags, ok := queryTags(w, r)
	if !ok {
		return
	}
	var out []catalogService
	s.blockingQuery(w, r, func() (uint64, <-chan struct{}) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		idx, ch := s.nameIndexLocked(name)
		out = s.catalogServiceLocked(name, tags)
		return idx, ch
	}, func() any { return out })
}

func (s *Server) checkService(w http.ResponseWriter, r *http.Request, name string) bool {
	if name == "" {
		textError(w, http.StatusBadRequest, "Missing service name")
		return false
	}
	return s.checkDC(w, r)
}

// handleStatusLeader implements GET /v1/status/leader
// (developer.hashicorp.com/consul/api-docs/status#get-raft-leader): this
// single node is always the leader; its address is the HTTP address.
func (s *Server) handleStatusLeader(w http.ResponseWriter, r *http.Request, _ string) {
	s.writeJSON(w, r, s.Addr())
}

// handleStatusPeers implements GET /v1/status/peers
// (developer.hashicorp.com/consul/api-docs/status#list-raft-peers).
func (s *Server) handleStatusPeers(w http.ResponseWriter, r *http.Request, _ string) {
	s.writeJSON(w, r, []string{s.Addr()})
}

// parseBlocking reads ?index and ?wait (Consul docs, features/blocking).
// The wait defaults to 5m, is capped at 10m and gets up to wait/16 of
// jitter.
func parseBlocking(r *http.Request) (index uint64, wait time.Duration, err error) {
	q := r.URL.Query()
	if v := q.Get("index"); v != "" {
		index, err = strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("index: %q is not an unsigned integer", v)
		}
	}
	wait = defaultWait
	if v := q.Get("wait"); v != "" {
		wait, err = time.ParseDuration(v)
		if err != nil {
			return 0, 0, fmt.Errorf("wait: %q is not a duration such as \"30s\" or \"5m\"", v)
		}
		if wait <= 0 {
			wait = defaultWait
		}
	}
	wait = min(wait, maxWait)
	wait += rand.N(wait/16 + 1)
	return index, wait, nil
}

// blockingQuery answers a query that supports Consul's blocking semantics.
// read evaluates the query and returns its index and the channel that is
// closed at its next change; result returns what read computed. Without
// ?index, or when the caller's index is behind, it answers at once. A
// caller's index ahead of the whole registry comes from before a restart
// that lost state: it is answered at once too, so the client resets.
// Otherwise it waits for a change, the wait, or the end of the request or
// server — one channel receive per watcher, no polling.
func (s *Server) blockingQuery(w http.ResponseWriter, r *http.Request, read func() (uint64, <-chan struct{}), result func() any) {
	minIndex, wait, err := parseBlocking(r)
	if err != nil {
		textError(w, http.StatusBadRequest, err.Error())
		return
	}
	idx, ch := read()
	if minIndex > 0 && idx <= minIndex {
		s.mu.RLock()
		ahead := minIndex > s.index
		s.mu.RUnlock()
		if !ahead {
			if n := s.blocking.Add(1); n > maxBlocking {
				s.blocking.Add(-1)
				textError(w, http.StatusTooManyRequests, fmt.Sprintf("too many blocking queries in flight (limit %d); retry later", maxBlocking))
				return
			}
			defer s.blocking.Add(-1)
			timer := time.NewTimer(wait)
			defer timer.Stop()
		wait:
			for idx <= minIndex {
				select {
				case <-ch:
					idx, ch = read()
				case <-timer.C:
					break wait
				case <-s.ctx.Done():
					// Close, also when Handler() is mounted on a server whose
					// request contexts do not derive from s.ctx.
					textError(w, http.StatusServiceUnavailable, "registry is shutting down")
					return
				case <-r.Context().Done():
					if s.ctx.Err() != nil {
						textError(w, http.StatusServiceUnavailable, "registry is shutting down")
					}
					return
				}
			}
		}
	}
	h := w.Header()
	h.Set("X-Consul-Index", strconv.FormatUint(idx, 10))
	h.Set("X-Consul-KnownLeader", "true")
	h.Set("X-Consul-LastContact", "0")
	s.writeJSON(w, r, result())
}

// Response shapes, with Consul's field names and casing
// (github.com/hashicorp/consul/api: AgentService, HealthCheck, ServiceEntry,
// Node, CatalogService).

type agentService struct {
	ID                string
	Service           string
	Tags              []string
	Meta              map[string]string
	Port              int
	Address           string
	Weights           Weights
	EnableTagOverride bool
	Datacenter        string `json:",omitempty"`
	CreateIndex       uint64 `json:",omitempty"`
	ModifyIndex       uint64 `json:",omitempty"`
}

type checkDefinition struct {
	HTTP                           string              `json:",omitempty"`
	Header                         map[string][]string `json:",omitempty"`
	Method                         string              `json:",omitempty"`
	Body                           string              `json:",omitempty"`
	TLSServerName                  string              `json:",omitempty"`
	TLSSkipVerify                  bool                `json:",omitempty"`
	TCP                            string              `json:",omitempty"`
	Interval                       string
	Timeout                        string
	DeregisterCriticalServiceAfter string
}

type healthCheck struct {
	Node        string
	CheckID     string
	Name        string
	Status      string
	Notes       string
	Output      string
	ServiceID   string
	ServiceName string
	ServiceTags []string
	Type        string
	ExposedPort int
	Definition  checkDefinition
	CreateIndex uint64 `json:",omitempty"`
	ModifyIndex uint64 `json:",omitempty"`
}

type node struct {
	ID              string
	Node            string
	Address         string
	Datacenter      string
	TaggedAddresses map[string]string
	Meta            map[string]string
	CreateIndex     uint64
	ModifyIndex     uint64
}

type serviceEntry struct {
	Node    *node
	Service *agentService
	Checks  []*healthCheck
}

type catalogService struct {
	ID                       string
	Node                     string
	Address                  string
	Datacenter               string
	TaggedAddresses          map[string]string
	NodeMeta                 map[string]string
	ServiceID                string
	ServiceName              string
	ServiceAddress           string
	ServiceTags              []string
	ServiceMeta              map[string]string
	ServicePort              int
	ServiceWeights           Weights
	ServiceEnableTagOverride bool
	CreateIndex              uint64
	ModifyIndex              uint64
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (s *Server) agentServiceLocked(ss *serviceState, withIndexes bool) *agentService {
	a := &agentService{
		ID: ss.def.ID, Service: ss.def.Name, Tags: nonNil(slices.Clone(ss.def.Tags)),
		Meta: nonNilMap(ss.def.Meta), Port: ss.def.Port, Address: ss.def.Address,
		Weights: ss.def.Weights, EnableTagOverride: ss.def.EnableTagOverride, Datacenter: s.datacenter,
	}
	if withIndexes {
		a.CreateIndex, a.ModifyIndex = ss.createIndex, ss.modifyIndex
	}
	return a
}

func durString(d duration) string { return time.Duration(d).String() }

func (s *Server) healthCheckLocked(c *checkState, withIndexes bool) *healthCheck {
	var tags []string
	if ss := s.services[c.serviceID]; ss != nil {
		tags = slices.Clone(ss.def.Tags)
	}
	timeout := c.def.Timeout
	if timeout == 0 && c.def.Type != typeTTL {
		timeout = duration(defaultCheckTimeout)
	}
	h := &healthCheck{
		Node: s.cfg.NodeName, CheckID: c.def.CheckID, Name: c.def.Name, Status: c.status,
		Notes: c.def.Notes, Output: c.output, ServiceID: c.serviceID, ServiceName: c.serviceName,
		ServiceTags: nonNil(tags), Type: c.def.Type,
		Definition: checkDefinition{
			HTTP: c.def.HTTP, Header: c.def.Header, Method: c.def.Method, Body: c.def.Body,
			TLSServerName: c.def.TLSServerName, TLSSkipVerify: c.def.TLSSkipVerify, TCP: c.def.TCP,
			Interval: durString(c.def.Interval), Timeout: durString(timeout),
			DeregisterCriticalServiceAfter: durString(c.def.DeregisterCriticalServiceAfter),
		},
	}
	if withIndexes {
		h.CreateIndex, h.ModifyIndex = c.createIndex, c.modifyIndex
	}
	return h
}

func (s *Server) nodeLocked() *node {
	return &node{
		ID: s.nodeID, Node: s.cfg.NodeName, Address: s.nodeAddr, Datacenter: s.datacenter,
		TaggedAddresses: map[string]string{"lan": s.nodeAddr, "wan": s.nodeAddr},
		Meta:            map[string]string{"consul-network-segment": ""},
		CreateIndex:     1, ModifyIndex: 1,
	}
}

// serfHealthLocked is the node's own check, which Consul lists with every
// service instance of the node; the embedded node is always alive.
func (s *Server) serfHealthLocked() *healthCheck {
	return &healthCheck{
		Node: s.cfg.NodeName, CheckID: "serfHealth", Name: "Serf Health Status", Status: statusPassing,
		Output: "Agent alive and reachable", ServiceTags: []string{},
		Definition:  checkDefinition{Interval: "0s", Timeout: "0s", DeregisterCriticalServiceAfter: "0s"},
		CreateIndex: 1, ModifyIndex: 1,
	}
}

// healthEntriesLocked is the body of GET /v1/health/service/:name. With
// passing, instances with any check not passing are left out (Consul docs:
// "passing ... return only nodes with all checks in the passing state").
func (s *Server) healthEntriesLocked(name string, tags []string, passing bool) []serviceEntry {
	out := []serviceEntry{}
	ns := s.names[name]
	if ns == nil {
		return out
	}
	nd := s.nodeLocked()
	for _, ss := range sortedInstances(ns) {
		if !ss.hasTags(tags) || (passing && ss.health() != statusPassing) {
			continue
		}
		e := serviceEntry{Node: nd, Service: s.agentServiceLocked(ss, true), Checks: []*healthCheck{s.serfHealthLocked()}}
		for _, c := range ss.checks {
			e.Checks = append(e.Checks, s.healthCheckLocked(c, true))
		}
		out = append(out, e)
	}
	return out
}

func (s *Server) catalogServiceLocked(name string, tags []string) []catalogService {
	out := []catalogService{}
	ns := s.names[name]
	if ns == nil {
		return out
	}
	nd := s.nodeLocked()
	for _, ss := range sortedInstances(ns) {
		if !ss.hasTags(tags) {
			continue
		}
		out = append(out, catalogService{
			ID: nd.ID, Node: nd.Node, Address: nd.Address, Datacenter: nd.Datacenter,
			TaggedAddresses: nd.TaggedAddresses, NodeMeta: nd.Meta,
			ServiceID: ss.def.ID, ServiceName: ss.def.Name, ServiceAddress: ss.def.Address,
			ServiceTags: nonNil(slices.Clone(ss.def.Tags)), ServiceMeta: nonNilMap(ss.def.Meta),
			ServicePort: ss.def.Port, ServiceWeights: ss.def.Weights,
			ServiceEnableTagOverride: ss.def.EnableTagOverride,
			CreateIndex:              ss.createIndex, ModifyIndex: ss.modifyIndex,
		})
	}
	return out
}
