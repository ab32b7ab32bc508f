package config

import (
	"slices"
	"testing"
	"time"
)

func TestParseClientDefaultsLikeTheProxy(t *testing.T) {
	c, err := ParseClient("client.yaml", []byte(`
upstreams:
  orders:
    discovery: {registry: anything-the-program-gives, service: orders}
routes:
  - upstream: orders
    retry: {attempts: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	u, r := c.Upstreams["orders"], c.Routes[0]
	if u.Balance.Policy != DefaultBalancePolicy || u.Health.Passive == nil || *u.Discovery.PassingOnly != true ||
		r.Name != "client/0" || r.Timeout.Std() != 60*time.Second || r.Match.PathPrefix != "/" || c.Discovery.EmptyGrace != DefaultEmptyGrace {
		t.Fatalf("defaults not applied: upstream %+v, route %+v, discovery %+v", u, r, c.Discovery)
	}
}

func TestParseClientRefusesWhatAClientDoesNotUse(t *testing.T) {
	_, err := ParseClient("client.yaml", []byte(`upstreams:
  orders:
    discovery: {service: orders}
routes:
  - upstream: orders
    buffer_requests: {max: 1MiB}
admin: {listen: 127.0.0.1:9901}
`))
	got := problemStrings(err)
	want := []string{
		`client.yaml:3:5: upstream "orders": discovery.registry is required (name a registry the program gives the client with client.WithRegistry)`,
		`client.yaml:6:5: buffer_requests is for the proxy: a program holds its own request bodies`,
		`client.yaml:7:1: unknown key "admin" at the top level of a client configuration (known: upstreams, routes, discovery)`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %q, want %q", got, want)
	}
}

func problemStrings(err error) []string {
	errs, _ := err.(Errors)
	var out []string
	for _, p := range errs {
		out = append(out, p.String())
	}
	return out
}
