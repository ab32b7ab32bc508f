package acme

import (
	"net/http"
	"strings"
)

// ChallengePrefix is the path under which the CA fetches http-01
// challenge answers.
const ChallengePrefix = "/.well-known/acme-challenge/"

// HTTPChallenges answers http-01 challenges on a cleartext listener for
// the Managers that name it, each for its own hosts. The zero value and
// nil answer nothing.
type HTTPChallenges struct {
	byHost map[string]*Manager
}

// NewHTTPChallenges returns the responder for ms, which must have
// Config.HTTP01 set and no host in common.
func NewHTTPChallenges(ms ...*Manager) *HTTPChallenges {
	c := &HTTPChallenges{byHost: map[string]*Manager{}}
	for _, m := range ms {
		for h := range m.hosts {
			c.byHost[h] = m
		}
	}
	return c
}

// Serve answers r and returns true when it is an http-01 challenge
// request for one of the hosts (answered 404 when there is no such
// challenge under way); otherwise it returns false and writes nothing,
// and the listener serves r as any other request.
func (c *HTTPChallenges) Serve(w http.ResponseWriter, r *http.Request) bool {
	if c == nil || !strings.HasPrefix(r.URL.Path, ChallengePrefix) {
		return false
	}
	m := c.byHost[normalizeHost(r.Host)]
	if m == nil || m.http == nil {
		return false
	}
	m.serveHTTP01(w, r)
	return true
}
