package app_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
)

// TestAutoRouteHonoursFabioStrip runs `serve` with the embedded registry: a
// service tagged urlprefix-/shop strip=/shop (fabio's option) gets a route
// for /shop whose requests reach it without the prefix, query kept.
func TestAutoRouteHonoursFabioStrip(t *testing.T) {
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "shop saw "+r.RequestURI)
	}))
	t.Cleanup(shop.Close)
	listen := freeAddr(t)
	a, _ := serve(t, fmt.Sprintf(`admin: {listen: 127.0.0.1:0}
log: {level: error}
registry: {listen: 127.0.0.1:0}
listeners:
  - name: web
    listen: %s
    auto_routes: true
`, listen))
	c, err := consul.NewClient(&consul.Config{Address: a.RegistryAddr()})
	if err != nil {
		t.Fatal(err)
	}
	h, p := splitPort(t, hostport(shop))
	err = c.Agent().ServiceRegister(&consul.AgentServiceRegistration{
		ID: "shop-1", Name: "shop", Address: h, Port: p, Tags: []string{"urlprefix-/shop strip=/shop"},
		Check: &consul.AgentServiceCheck{TTL: "1m", Status: consul.HealthPassing},
	})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + listen + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get("/shop/cart?id=7")
		if code == 200 {
			if body != "shop saw /cart?id=7" {
				t.Fatalf("/shop/cart?id=7 reached the service as %q, want /cart?id=7 (strip=/shop)", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the auto route for /shop did not appear: %d %q", code, body)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	if code, body := get("/shop"); code != 200 || body != "shop saw /" {
		t.Errorf("/shop: %d %q, want the service to see /", code, body)
	}
}
