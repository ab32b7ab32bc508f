// Package acme gets and renews a TLS listener's certificates from an ACME
// certificate authority (Let's Encrypt, or any RFC 8555 server such as
// pebble or a private step-ca), over golang.org/x/crypto/acme/autocert.
//
// A Manager serves the certificates of a fixed list of host names. Start
// obtains them in the background, one goroutine per host, retrying with
// a growing delay (1m, 2m, 5m ... up to 1h) when the CA fails; a
// certificate found on disk is used at once without asking the CA.
// GetCertificate, the listener's tls.Config hook, never touches the
// network: while a host's certificate is not there yet, its handshakes
// fail at once with an error saying so, rather than wait minutes on the
// CA inside the handshake (which is what autocert alone would do on a
// host's first handshake). Renewal is autocert's: a timer per certificate
// renews it when a third of its lifetime is left (at most 30 days before
// it expires), in the background, while the old one is still served.
//
// Challenges: tls-alpn-01 is always offered, answered by the TLS listener
// itself (its tls.Config must list ALPNProto in NextProtos and take
// GetCertificate). With Config.HTTP01, http-01 is offered too, answered
// by a cleartext listener that hands /.well-known/acme-challenge/ requests
// to HTTPChallenges; autocert tries tls-alpn-01 first and turns to
// http-01 when it fails (for instance when the CA cannot reach the TLS
// listener on port 443).
//
// Storage: certificates, their keys and the ACME account key are files in
// Config.Storage (autocert.DirCache: one file per host, key and chain in
// PEM, mode 0600 in a 0700 directory). Keep it across restarts: a CA's
// rate limits (Let's Encrypt: 5 certificates a week for the same names)
// are soon spent by a server that asks anew at each start.
package acme
