package tcpproxy

// Reading the server name of a TLS ClientHello without terminating TLS.
//
// The wire format, from RFC 8446 (TLS 1.3) sections 5.1 and 4.1.2, the same
// for the ClientHello of TLS 1.0 to 1.2 (RFC 5246 7.4.1.2):
//
//	TLSPlaintext: type(1) = 22 handshake, legacy_record_version(2),
//	              length(2) <= 2^14, fragment
//	Handshake:    msg_type(1) = 1 client_hello, length(3), body
//	              (one handshake message may span several records)
//	ClientHello:  legacy_version(2), random(32), session_id<0..32>,
//	              cipher_suites<2..2^16-2>, compression_methods<1..2^8-1>,
//	              extensions<8..2^16-1> (absent in old clients)
//	Extension:    type(2), data<0..2^16-1>
//
// and from RFC 6066 section 3, the server_name extension (type 0):
// ServerNameList<1..2^16-1> of name_type(1) (0 = host_name) and
// HostName<1..2^16-1>, "ASCII encoding without a trailing dot", with at
// most one name of each type. We lower-case the name for matching and, to
// be lenient with clients that get this wrong, drop one trailing dot.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	recordHeaderLen = 5
	maxRecordLen    = 1 << 14 // TLSPlaintext.length limit
	// maxHelloLen bounds the ClientHello message we wait for. Today's
	// largest (post-quantum key shares, many extensions) are ~2 KiB.
	maxHelloLen = 1 << 14
	// maxHelloBytes bounds the bytes buffered while waiting for the
	// ClientHello: the message plus the headers of the records that carry
	// it, allowing for it to be split into up to 8 records.
	maxHelloBytes = maxHelloLen + 8*recordHeaderLen
)

// parseClientHello looks for a complete ClientHello at the start of b,
// which may carry it in one or more handshake records. It returns the
// lower-case server name ("" when the client sent none), errNeedMore when b
// is a valid but incomplete beginning, or an error saying why b is not a
// ClientHello.
func parseClientHello(b []byte) (string, error) {
	var msg []byte // the handshake message, once it spans records
	pos := 0
	for records := 0; ; records++ {
		if len(b)-pos < recordHeaderLen {
			if len(b) > pos && b[pos] != 22 {
				return "", fmt.Errorf("tls: record type %d, want 22 (handshake)", b[pos])
			}
			return "", errNeedMore
		}
		h := b[pos : pos+recordHeaderLen]
		if h[0] != 22 {
			return "", fmt.Errorf("tls: record type %d, want 22 (handshake)", h[0])
		}
		if h[1] != 3 {
			return "", fmt.Errorf("tls: record version %d.%d is not TLS", h[1], h[2])
		}
		rlen := int(binary.BigEndian.Uint16(h[3:5]))
		if rlen == 0 || rlen > maxRecordLen {
			return "", fmt.Errorf("tls: record length %d, want 1 to %d", rlen, maxRecordLen)
		}
		if records == 8 {
			return "", errors.New("tls: ClientHello spread over more than 8 records")
		}
		if len(b)-pos-recordHeaderLen < rlen {
			// Check what we can of a partial record early: garbage
			// should not wait for the timeout.
			frag := b[pos+recordHeaderLen:]
			if msg == nil && len(frag) > 0 && frag[0] != 1 {
				return "", fmt.Errorf("tls: handshake message type %d, want 1 (ClientHello)", frag[0])
			}
			return "", errNeedMore
		}
		frag := b[pos+recordHeaderLen : pos+recordHeaderLen+rlen]
		pos += recordHeaderLen + rlen
		if msg == nil && records == 0 {
			msg = frag // the common case: no copy
		} else {
			msg = append(msg[:len(msg):len(msg)], frag...)
		}
		if len(msg) < 4 {
			continue
		}
		if msg[0] != 1 {
			return "", fmt.Errorf("tls: handshake message type %d, want 1 (ClientHello)", msg[0])
		}
		mlen := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if mlen > maxHelloLen {
			return "", fmt.Errorf("tls: ClientHello of %d bytes is over our limit of %d", mlen, maxHelloLen)
		}
		if len(msg) >= 4+mlen {
			return helloServerName(msg[4 : 4+mlen])
		}
	}
}

// helloServerName returns the server name of a ClientHello body.
func helloServerName(body []byte) (string, error) {
	r := reader(body)
	if _, ok := r.take(2 + 32); !ok { // legacy_version, random
		return "", errShortHello
	}
	if sid, ok := r.vec8(); !ok || len(sid) > 32 {
		return "", errors.New("tls: bad session_id in ClientHello")
	}
	if cs, ok := r.vec16(); !ok || len(cs) < 2 || len(cs)%2 != 0 {
		return "", errors.New("tls: bad cipher_suites in ClientHello")
	}
	if cm, ok := r.vec8(); !ok || len(cm) < 1 {
		return "", errors.New("tls: bad compression_methods in ClientHello")
	}
	if len(r) == 0 {
		return "", nil // no extensions: no name
	}
	exts, ok := r.vec16()
	if !ok || len(r) != 0 {
		return "", errors.New("tls: bad extensions block in ClientHello")
	}
	name, found := "", false
	for len(exts) > 0 {
		typ, ok1 := exts.uint16()
		data, ok2 := exts.vec16()
		if !ok1 || !ok2 {
			return "", errors.New("tls: truncated extension in ClientHello")
		}
		if typ != 0 {
			continue
		}
		if found {
			return "", errors.New("tls: two server_name extensions in ClientHello")
		}
		found = true
		n, err := parseServerNameExt(data)
		if err != nil {
			return "", err
		}
		name = n
	}
	return name, nil
}

var errShortHello = errors.New("tls: ClientHello too short")

func parseServerNameExt(data reader) (string, error) {
	list, ok := data.vec16()
	if !ok || len(data) != 0 || len(list) == 0 {
		return "", errors.New("tls: bad server_name extension")
	}
	name := ""
	for len(list) > 0 {
		typ, ok1 := list.take(1)
		n, ok2 := list.vec16()
		if !ok1 || !ok2 || len(n) == 0 {
			return "", errors.New("tls: bad entry in server_name extension")
		}
		if typ[0] != 0 {
			continue // not host_name
		}
		if name != "" {
			return "", errors.New("tls: two host names in server_name extension")
		}
		s, err := hostName(n)
		if err != nil {
			return "", err
		}
		name = s
	}
	return name, nil
}

// hostName checks an SNI host name and returns it lower-cased, without a
// trailing dot.
func hostName(n []byte) (string, error) {
	if len(n) > 0 && n[len(n)-1] == '.' {
		n = n[:len(n)-1]
	}
	if len(n) == 0 || len(n) > maxSNINameLen {
		return "", fmt.Errorf("tls: server name of %d bytes, want 1 to %d", len(n), maxSNINameLen)
	}
	out := make([]byte, len(n))
	for i, c := range n {
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return "", fmt.Errorf("tls: character %q not allowed in a server name", c)
		}
		out[i] = c
	}
	return string(out), nil
}

// reader consumes a byte slice front to back.
type reader []byte

func (r *reader) take(n int) ([]byte, bool) {
	if len(*r) < n {
		return nil, false
	}
	b := (*r)[:n]
	*r = (*r)[n:]
	return b, true
}

func (r *reader) uint16() (uint16, bool) {
	b, ok := r.take(2)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint16(b), true
}

func (r *reader) vec8() (reader, bool) {
	n, ok := r.take(1)
	if !ok {
		return nil, false
	}
	b, ok := r.take(int(n[0]))
	return b, ok
}

func (r *reader) vec16() (reader, bool) {
	n, ok := r.uint16()
	if !ok {
		return nil, false
	}
	b, ok := r.take(int(n))
	return b, ok
}
