package tcpproxy

// The PROXY protocol, versions 1 (text) and 2 (binary), as HAProxy's
// doc/proxy-protocol.txt specifies it. What we took from it:
//
//   - v1 is one line "PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n" with exactly
//     one space between fields, no leading zeroes in ports or IPv4 octets,
//     at most 107 bytes with the CRLF; "PROXY UNKNOWN ...\r\n" means "use the
//     real connection's addresses", whatever precedes the CRLF.
//   - v2 is the 12-byte signature \r\n\r\n\0\r\nQUIT\n, a version/command
//     byte (version 2; command 0 LOCAL or 1 PROXY, anything else drops the
//     connection), a family/protocol byte (0x11 TCP4 with 12 address bytes,
//     0x21 TCP6 with 36; UNSPEC, UDP and UNIX fall back to the real
//     addresses; unknown families or protocols are invalid) and a 16-bit
//     length of what follows: addresses, then TLVs, which we skip. LOCAL
//     means the real addresses, whatever the family says, and the length
//     must still be honoured.
//   - "The receiver MUST NOT start processing the connection before it
//     receives a complete and valid PROXY protocol header", must drop a
//     connection whose header is invalid, "MUST not try to guess whether
//     the protocol header is present", and should only take it from
//     trusted proxies. Hence: trusted sources must send one, others are not
//     parsed at all.
//   - The header may arrive fragmented; the spec recommends tolerating
//     that, which we do, within the listener's proxy_protocol_timeout.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// proxyV2Sig is the v2 signature.
var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

const (
	proxyV1MaxLen = 107 // "PROXY UNKNOWN <ipv6> <ipv6> 65535 65535\r\n"
	// proxyV2MaxLen bounds a v2 header we accept (16 fixed bytes plus
	// addresses and TLVs). The protocol allows 16+65535; real senders
	// (HAProxy, cloud balancers) send a few hundred at most.
	proxyV2MaxLen = 4096
)

// errNeedMore says that the bytes so far are a valid beginning and the
// parser needs more of them.
var errNeedMore = errors.New("need more bytes")

// proxyHeader is a parsed PROXY header.
type proxyHeader struct {
	// local is set when the header says to use the connection's real
	// addresses (v2 LOCAL, v1 UNKNOWN, v2 UNSPEC/UDP/UNIX).
	local    bool
	src, dst netip.AddrPort
}

// parseProxyHeader parses a PROXY header at the start of b. It returns the
// header and its length in b, errNeedMore when b is a valid but incomplete
// beginning, or an error saying why b is not a valid header.
func parseProxyHeader(b []byte) (proxyHeader, int, error) {
	if len(b) == 0 {
		return proxyHeader{}, 0, errNeedMore
	}
	switch b[0] {
	case 'P':
		return parseProxyV1(b)
	case '\r':
		return parseProxyV2(b)
	}
	return proxyHeader{}, 0, errors.New("proxy protocol: no PROXY header (the connection's first bytes are neither v1 nor v2)")
}

func parseProxyV1(b []byte) (proxyHeader, int, error) {
	const prefix = "PROXY "
	if n := min(len(b), len(prefix)); string(b[:n]) != prefix[:n] {
		return proxyHeader{}, 0, errors.New("proxy protocol v1: line does not start with \"PROXY \"")
	}
	end := bytes.Index(b[:min(len(b), proxyV1MaxLen)], []byte("\r\n"))
	if end < 0 {
		if len(b) >= proxyV1MaxLen {
			return proxyHeader{}, 0, fmt.Errorf("proxy protocol v1: no CRLF in the first %d bytes", proxyV1MaxLen)
		}
		if i := bytes.IndexAny(b, "\r\n"); i >= 0 && (b[i] == '\n' || i+1 < len(b)) {
			return proxyHeader{}, 0, errors.New("proxy protocol v1: line ends without CRLF")
		}
		return proxyHeader{}, 0, errNeedMore
	}
	line := string(b[len(prefix):end])
	n := end + 2
	if isWord(line, "UNKNOWN") {
		// "the receiver must ignore anything presented before the CRLF"
		return proxyHeader{local: true}, n, nil
	}
	var want4 bool
	switch {
	case len(line) > 5 && line[:5] == "TCP4 ":
		want4 = true
	case len(line) > 5 && line[:5] == "TCP6 ":
	default:
		return proxyHeader{}, 0, fmt.Errorf("proxy protocol v1: protocol must be TCP4, TCP6 or UNKNOWN in %q", line)
	}
	f := splitSpaces(line[5:])
	if len(f) != 4 {
		return proxyHeader{}, 0, fmt.Errorf("proxy protocol v1: want 4 fields after the protocol (single spaces), got %q", line)
	}
	src, err1 := parseV1Addr(f[0], want4)
	dst, err2 := parseV1Addr(f[1], want4)
	sp, err3 := parseV1Port(f[2])
	dp, err4 := parseV1Port(f[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return proxyHeader{}, 0, fmt.Errorf("proxy protocol v1: %w", err)
	}
	return proxyHeader{src: netip.AddrPortFrom(src, sp), dst: netip.AddrPortFrom(dst, dp)}, n, nil
}

// isWord reports whether s is word alone or word followed by a space.
func isWord(s, word string) bool {
	return s == word || (len(s) > len(word) && s[:len(word)] == word && s[len(word)] == ' ')
}

// splitSpaces splits on single spaces; an empty field (two spaces in a row,
// a leading or trailing space) stays in the result and fails parsing.
func splitSpaces(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i])
		s = s[i+1:]
		if len(out) > 4 {
			return out
		}
	}
}

func parseV1Addr(s string, want4 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(s) // rejects leading zeroes in IPv4 octets
	if err != nil {
		return netip.Addr{}, fmt.Errorf("address %q: %v", s, err)
	}
	if want4 && !a.Is4() {
		return netip.Addr{}, fmt.Errorf("address %q is not IPv4 (TCP4)", s)
	}
	if !want4 && (!a.Is6() || a.Zone() != "") {
		return netip.Addr{}, fmt.Errorf("address %q is not a plain IPv6 address (TCP6)", s)
	}
	return a, nil
}

func parseV1Port(s string) (uint16, error) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("port %q: want 0 to 65535 without leading zeroes", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("port %q: not a decimal number", s)
		}
	}
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q: want 0 to 65535", s)
	}
	return uint16(p), nil
}

func parseProxyV2(b []byte) (proxyHeader, int, error) {
	if n := min(len(b), len(proxyV2Sig)); !bytes.Equal(b[:n], proxyV2Sig[:n]) {
		return proxyHeader{}, 0, errors.New("proxy protocol v2: bad signature")
	}
	if len(b) < 16 {
		return proxyHeader{}, 0, errNeedMore
	}
	verCmd, fam := b[12], b[13]
	if verCmd>>4 != 2 {
		return proxyHeader{}, 0, fmt.Errorf("proxy protocol v2: version %d, want 2", verCmd>>4)
	}
	cmd := verCmd & 0x0f
	if cmd > 1 {
		return proxyHeader{}, 0, fmt.Errorf("proxy protocol v2: unknown command %#x", cmd)
	}
	if fam>>4 > 3 || fam&0x0f > 2 {
		return proxyHeader{}, 0, fmt.Errorf("proxy protocol v2: unknown address family/protocol %#02x", fam)
	}
	alen := int(binary.BigEndian.Uint16(b[14:16]))
	n := 16 + alen
	if n > proxyV2MaxLen {
		return proxyHeader{}, 0, fmt.Errorf("proxy protocol v2: header of %d bytes is over our limit of %d", n, proxyV2MaxLen)
	}
	if len(b) < n {
		return proxyHeader{}, 0, errNeedMore
	}
	if cmd == 0 { // LOCAL: the real endpoints, the family is ignored
		return proxyHeader{local: true}, n, nil
	}
	a := b[16:n]
	switch fam {
	case 0x11: // TCP over IPv4
		if len(a) < 12 {
			return proxyHeader{}, 0, fmt.Errorf("proxy protocol v2: TCP4 needs 12 address bytes, got %d", len(a))
		}
		src := netip.AddrFrom4([4]byte(a[0:4]))
		dst := netip.AddrFrom4([4]byte(a[4:8]))
		return proxyHeader{
			src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[8:10])),
			dst: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(a[10:12])),
		}, n, nil
	case 0x21: // TCP over IPv6
		if len(a) < 36 {
			return proxyHeader{}, 0, fmt.Errorf("proxy protocol v2: TCP6 needs 36 address bytes, got %d", len(a))
		}
		src := netip.AddrFrom16([16]byte(a[0:16]))
		dst := netip.AddrFrom16([16]byte(a[16:32]))
		return proxyHeader{
			src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(a[32:34])),
			dst: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(a[34:36])),
		}, n, nil
	}
	// UNSPEC, UDP, UNIX: "falls back to the UNSPEC mode", the real
	// addresses.
	return proxyHeader{local: true}, n, nil
}

// appendProxyHeader appends a PROXY header of version "v1" or "v2" for a
// connection from src to dst. Addresses of different families are sent as
// IPv6 (IPv4-mapped); invalid ones as v1 UNKNOWN or a v2 PROXY header of
// family UNSPEC.
func appendProxyHeader(b []byte, version string, src, dst netip.AddrPort) []byte {
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	valid := sa.IsValid() && da.IsValid()
	v4 := valid && sa.Is4() && da.Is4()
	if valid && !v4 {
		sa, da = netip.AddrFrom16(sa.As16()), netip.AddrFrom16(da.As16())
	}
	if version == "v1" {
		if !valid {
			return append(b, "PROXY UNKNOWN\r\n"...)
		}
		proto := "PROXY TCP6 "
		if v4 {
			proto = "PROXY TCP4 "
		}
		b = append(b, proto...)
		b = sa.WithZone("").AppendTo(b)
		b = append(b, ' ')
		b = da.WithZone("").AppendTo(b)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(src.Port()), 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(dst.Port()), 10)
		return append(b, '\r', '\n')
	}
	b = append(b, proxyV2Sig...)
	switch {
	case !valid:
		return append(b, 0x21, 0x00, 0, 0)
	case v4:
		b = append(b, 0x21, 0x11, 0, 12)
		s4, d4 := sa.As4(), da.As4()
		b = append(b, s4[:]...)
		b = append(b, d4[:]...)
	default:
		b = append(b, 0x21, 0x21, 0, 36)
		s16, d16 := sa.As16(), da.As16()
		b = append(b, s16[:]...)
		b = append(b, d16[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}
