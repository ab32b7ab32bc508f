package health

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// GRPCCheck passes when the endpoint's grpc.health.v1.Health/Check answers
// SERVING for Service ("" asks about the server as a whole).
//
// It speaks the gRPC wire protocol over cleartext HTTP/2 (h2c, prior
// knowledge), or HTTP/2 over TLS when TLS is set, with the standard
// library, so that the health package does not pull grpc-go into every
// switchboard binary; the two messages involved have one field each. The
// zero value is ready to use; a GRPCCheck must not be copied after first
// use.
type GRPCCheck struct {
	// Service is the service name sent in HealthCheckRequest.
	Service string
	// Authority is the :authority to send; empty means the endpoint address.
	Authority string
	// TLS, when set, speaks HTTP/2 over TLS with it (ServerName empty: the
	// endpoint's host).
	TLS *tls.Config

	once   sync.Once
	client *http.Client
}

// gRPC health serving statuses (grpc.health.v1.HealthCheckResponse).
var grpcServingStatus = map[uint64]string{0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}

// gRPC status codes worth naming in a reason; others are shown as numbers.
var grpcCodes = map[string]string{"5": "NotFound", "12": "Unimplemented", "14": "Unavailable", "4": "DeadlineExceeded"}

func (g *GRPCCheck) init() {
	g.once.Do(func() {
		var p http.Protocols
		if g.TLS != nil {
			p.SetHTTP2(true)
		} else {
			p.SetUnencryptedHTTP2(true)
		}
		// One connection per check, closed after it, as for HTTPCheck.
		g.client = &http.Client{Transport: &http.Transport{Proxy: nil, Protocols: &p, DisableKeepAlives: true, TLSClientConfig: checkTLS(g.TLS)}}
	})
}

// Check calls Health/Check on addr (host:port).
func (g *GRPCCheck) Check(ctx context.Context, addr string) error {
	g.init()
	msg := grpcFrame(healthCheckRequest(g.Service))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, scheme(g.TLS)+addr+"/grpc.health.v1.Health/Check", bytes.NewReader(msg))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if g.Authority != "" {
		req.Host = g.Authority
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", "switchboard-health/1")
	resp, err := g.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("http status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyRead))
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	// A trailers-only response carries grpc-status in the headers.
	code, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if code == "" {
		code, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if code != "0" {
		if code == "" {
			return errors.New("response without grpc-status")
		}
		if m, err := url.PathUnescape(message); err == nil {
			message = m
		}
		name := grpcCodes[code]
		if name == "" {
			name = "code " + code
		}
		return fmt.Errorf("grpc status %s: %s", name, message)
	}
	status, err := parseHealthCheckResponse(body)
	if err != nil {
		return err
	}
	if status != 1 {
		name := grpcServingStatus[status]
		if name == "" {
			name = strconv.FormatUint(status, 10)
		}
		return fmt.Errorf("serving status %s", name)
	}
	return nil
}

// healthCheckRequest encodes HealthCheckRequest{service = 1 (string)}.
func healthCheckRequest(service string) []byte {
	if service == "" {
		return nil
	}
	b := []byte{0x0a}
	b = binary.AppendUvarint(b, uint64(len(service)))
	return append(b, service...)
}

// grpcFrame prefixes a message with gRPC's length-prefixed framing:
// one byte "not compressed", four bytes big-endian length.
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// parseHealthCheckResponse decodes one framed HealthCheckResponse and returns
// its status (field 1, enum; absent means 0, UNKNOWN).
func parseHealthCheckResponse(b []byte) (uint64, error) {
	if len(b) < 5 {
		return 0, fmt.Errorf("response message: %d bytes, shorter than the frame header", len(b))
	}
	if b[0] != 0 {
		return 0, errors.New("response message: compressed, which was not asked for")
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(n) > uint64(len(b)-5) {
		return 0, fmt.Errorf("response message: frame says %d bytes, got %d", n, len(b)-5)
	}
	m := b[5 : 5+n]
	var status uint64
	for len(m) > 0 {
		key, k := binary.Uvarint(m)
		if k <= 0 {
			return 0, errors.New("response message: bad field key")
		}
		m = m[k:]
		switch wire := key & 7; wire {
		case 0: // varint
			v, k := binary.Uvarint(m)
			if k <= 0 {
				return 0, errors.New("response message: bad varint")
			}
			m = m[k:]
			if key>>3 == 1 {
				status = v
			}
		case 2: // length-delimited
			l, k := binary.Uvarint(m)
			if k <= 0 || l > uint64(len(m)-k) {
				return 0, errors.New("response message: bad length")
			}
			m = m[k+int(l):]
		case 1:
			if len(m) < 8 {
				return 0, errors.New("response message: short fixed64")
			}
			m = m[8:]
		case 5:
			if len(m) < 4 {
				return 0, errors.New("response message: short fixed32")
			}
			m = m[4:]
		default:
			return 0, fmt.Errorf("response message: wire type %d", wire)
		}
	}
	return status, nil
}
