package acme_test

import (
	"crypto/tls"
	"log"
	"net/http"

	"github.com/switchboard-dev/switchboard/proxy/acme"
)

// A TLS server whose certificate comes from Let's Encrypt, with http-01
// answered on port 80 as well as tls-alpn-01 on port 443. (Not run: it
// needs the names to point at this machine.)
func Example() {
	m, err := acme.New(acme.Config{
		Hosts:   []string{"shop.example.com"},
		Email:   "ops@example.com",
		Storage: "/var/lib/shop/acme",
		HTTP01:  true,
	})
	if err != nil {
		log.Fatal(err)
	}
	m.Start() // obtains in the background; handshakes fail until Ready
	defer m.Close()

	challenges := acme.NewHTTPChallenges(m)
	go http.ListenAndServe(":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if challenges.Serve(w, r) {
			return
		}
		http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusMovedPermanently)
	}))
	srv := &http.Server{
		Addr: ":443",
		TLSConfig: &tls.Config{
			GetCertificate: m.GetCertificate,
			NextProtos:     []string{"h2", "http/1.1", acme.ALPNProto},
		},
	}
	log.Fatal(srv.ListenAndServeTLS("", ""))
}
