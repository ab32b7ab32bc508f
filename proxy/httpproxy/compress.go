package httpproxy

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-dev/switchboard/config"
	"github.com/switchboard-dev/switchboard/internal/httpmetrics"
	"github.com/switchboard-dev/switchboard/proxy/h1"
)

// compressPolicy is a route's compress and decompress settings, ready for
// the relay of its responses (respond). Which response it touches, and
// how, is decided by start from the response's head and the request's
// Accept-Encoding; the body then goes through a coder.
//
// The rules, after RFC 9110 (8.4 Content-Encoding, 12.5.3
// Accept-Encoding, 15.3.7 206, 5.6.7 no-transform) and what nginx's gzip
// and gunzip modules and Caddy's encode do:
//   - A response is compressed when the client accepts one of the
//     route's algorithms with a q-value above 0 (listed, or by "*"), the
//     response has no Content-Encoding other than identity, its status is
//     not 1xx, 204, 206 or 304, it does not say Cache-Control:
//     no-transform, its media type is listed, and its body is at least
//     min_size (by Content-Length, or, when that is unknown, by reading up
//     to min_size of it first). The highest q-value wins; among equals,
//     the route's order.
//   - A request without Accept-Encoding gets no coding: RFC 9110 lets a
//     server send any then, but nginx and Caddy send none, and clients
//     that do not ask (curl without --compressed, scripts) do not decode.
//   - The compressed response loses Content-Length (it is sent chunked, or
//     as HTTP/2 DATA frames) and Accept-Ranges (ranges would be of the
//     identity bytes); a strong ETag becomes weak, as nginx does, since
//     the bytes are no longer those the tag names; Vary gets
//     Accept-Encoding, also on the identity answers to clients that do
//     not accept a coding, so that a cache keeps them apart.
//   - HEAD gets the header fields GET would (RFC 9110 9.3.2), and no body.
//   - decompress: an upstream answer in gzip or zstd for a client that
//     does not accept that coding is decoded as it streams (memory stays
//     bounded by the copy buffer and zstd's 8 MiB window, whatever the
//     expansion); when the route also compresses, it is encoded again
//     with an algorithm the client does accept.
type compressPolicy struct {
	algs       []coding // offered, most preferred first; nil: decompress only
	level      int      // index into the encoder levels
	minSize    int64
	types      []string // media types, as listed
	prefixes   []string // "text/" for "text/*"
	anyType    bool     // "*/*"
	decompress bool
	series     [numCodings][2]*httpmetrics.Coding // by coding, then compressing/decompressing
}

// coding is a content coding the proxy speaks.
type coding uint8

const (
	codingNone coding = iota
	codingGzip
	codingZstd
	numCodings
)

const (
	modeCompress = iota
	modeDecompress
)

// codingValues are the Content-Encoding values, shared by every response
// (nothing appends to a header's values in place).
var codingValues = [numCodings][]string{nil, {"gzip"}, {"zstd"}}

const (
	levelDefault = iota
	levelFastest
	levelBest
	numLevels
)

// The levels of each library: best is gzip's 9 and zstd's "better"
// (about zstd level 7); zstd's best level costs several times the CPU
// for a few percent, too much for responses made per request.
var (
	gzipLevels = [numLevels]int{gzip.DefaultCompression, gzip.BestSpeed, gzip.BestCompression}
	zstdLevels = [numLevels]zstd.EncoderLevel{zstd.SpeedDefault, zstd.SpeedFastest, zstd.SpeedBetterCompression}
)

// zstdWindow bounds the memory of a pooled zstd encoder: HTTP responses
// are mostly far smaller than zstd's default 8 MiB window, which would
// cost each encoder that much history.
const zstdWindow = 1 << 20

// zstdMaxDecodeWindow is the largest window decoded: RFC 9659 has HTTP's
// zstd coding stay within 8 MiB, and a larger one is refused rather than
// given memory.
const zstdMaxDecodeWindow = 8 << 20

// newCompressPolicy builds route rc's policy; series gives its metrics.
func newCompressPolicy(rc *config.Route, series func(algorithm, mode string) *httpmetrics.Coding) *compressPolicy {
	p := &compressPolicy{decompress: rc.Decompress}
	if c := rc.Compress; c != nil {
		for _, a := range c.Algorithms {
			p.algs = append(p.algs, codingOf(a))
		}
		switch c.Level {
		case config.CompressLevelFastest:
			p.level = levelFastest
		case config.CompressLevelBest:
			p.level = levelBest
		}
		if c.MinSize != nil {
			p.minSize = int64(*c.MinSize)
		}
		for _, t := range c.ContentTypes {
			switch typ, sub, _ := strings.Cut(t, "/"); {
			case typ == "*":
				p.anyType = true
			case sub == "*":
				p.prefixes = append(p.prefixes, typ+"/")
			default:
				p.types = append(p.types, t)
			}
		}
		for _, a := range p.algs {
			p.series[a][modeCompress] = series(codingValues[a][0], "compress")
		}
	}
	if p.decompress {
		for _, a := range []coding{codingGzip, codingZstd} {
			p.series[a][modeDecompress] = series(codingValues[a][0], "decompress")
		}
	}
	return p
}

// codingOf returns the coding a Content-Encoding or Accept-Encoding name
// stands for; x-gzip is gzip (RFC 9110 8.4.1.3).
func codingOf(name string) coding {
	switch {
	case strings.EqualFold(name, "gzip"), strings.EqualFold(name, "x-gzip"):
		return codingGzip
	case strings.EqualFold(name, "zstd"):
		return codingZstd
	}
	return codingNone
}

// start decides what becomes of response resp to request r, whose header
// is already copied to h (the client's): it rewrites h to match, and
// returns the coder that relays the body, or nil when the body goes as it
// is (copyBody). It may read the start of the body (to judge a body of
// unknown length against min_size, or a gzip header); err is a failure to
// read it, with nothing sent yet.
func (p *compressPolicy) start(h http.Header, r *http.Request, resp *http.Response) (*coder, error) {
	switch st := resp.StatusCode; {
	case st < 200, st == http.StatusNoContent, st == http.StatusPartialContent, st == http.StatusNotModified,
		r.Method == http.MethodConnect,
		httpguts.HeaderValuesContainsToken(h["Cache-Control"], "no-transform"):
		return nil, nil
	}
	have := codingNone
	if ce := h["Content-Encoding"]; len(ce) > 0 {
		if len(ce) != 1 {
			return nil, nil
		}
		v := strings.TrimSpace(ce[0])
		if !strings.EqualFold(v, "identity") {
			if have = codingOf(v); have == codingNone || !p.decompress {
				return nil, nil // not ours to decode, and never encoded twice
			}
		}
	}
	acc := parseAcceptEncoding(r.Header["Accept-Encoding"])
	head := r.Method == http.MethodHead
	if have != codingNone {
		return p.startDecode(h, acc, have, head, resp.Body)
	}

	if p.algs == nil || !p.typeOK(h["Content-Type"]) {
		return nil, nil
	}
	n := resp.ContentLength
	if n >= 0 && n < p.minSize {
		return nil, nil
	}
	addVary(h)
	enc := p.choose(&acc)
	if enc == codingNone {
		return nil, nil
	}
	if head {
		setEncoded(h, enc)
		return nil, nil
	}
	cd := getCoder(p, resp.Body)
	if n < 0 && p.minSize > 0 {
		if err := cd.gather(p.minSize); err != nil {
			cd.release()
			return nil, err
		}
		if cd.eof && int64(cd.held) < p.minSize {
			return cd, nil // too small after all: relayed as it is
		}
	}
	setEncoded(h, enc)
	cd.encodeWith(enc, p.level)
	return cd, nil
}

// startDecode is start for a response in coding have, when the route
// decompresses.
func (p *compressPolicy) startDecode(h http.Header, acc acceptEncoding, have coding, head bool, body io.Reader) (*coder, error) {
	addVary(h)
	if acc.q(have) > 0 {
		return nil, nil
	}
	delete(h, "Content-Encoding")
	delete(h, "Content-Length")
	delete(h, "Accept-Ranges")
	weakenETag(h)
	enc := codingNone
	if p.algs != nil && p.typeOK(h["Content-Type"]) {
		if enc = p.choose(&acc); enc != codingNone {
			h["Content-Encoding"] = codingValues[enc]
		}
	}
	if head {
		return nil, nil
	}
	cd := getCoder(p, body)
	if err := cd.decode(have); err != nil {
		cd.release()
		return nil, err
	}
	if enc != codingNone {
		cd.encodeWith(enc, p.level)
	}
	return cd, nil
}

// setEncoded rewrites header h for a body encoded with c.
func setEncoded(h http.Header, c coding) {
	h["Content-Encoding"] = codingValues[c]
	delete(h, "Content-Length")
	delete(h, "Accept-Ranges")
	weakenETag(h)
}

// weakenETag makes a strong entity tag weak: it named the bytes the
// upstream sent, and the client gets others (RFC 9110 8.8.1). A
// conditional request with the weak tag still matches upstream, where
// If-None-Match compares weakly (13.1.2).
func weakenETag(h http.Header) {
	if e := h["Etag"]; len(e) == 1 && strings.HasPrefix(e[0], `"`) {
		h["Etag"] = []string{"W/" + e[0]}
	}
}

// varyAcceptEncoding is the Vary of a response that had none, shared.
var varyAcceptEncoding = []string{"Accept-Encoding"}

// addVary adds Accept-Encoding to h's Vary, unless it is there or Vary is
// "*". The values are copied, not appended to in place.
func addVary(h http.Header) {
	v := h["Vary"]
	switch {
	case len(v) == 0:
		h["Vary"] = varyAcceptEncoding
	case httpguts.HeaderValuesContainsToken(v, "Accept-Encoding"), httpguts.HeaderValuesContainsToken(v, "*"):
	default:
		h["Vary"] = append(v[:len(v):len(v)], "Accept-Encoding")
	}
}

// typeOK reports whether a response of Content-Type ct is compressed.
// text/event-stream is compressed only when listed by name: a wildcard
// must not turn on the buffering of server-sent events by mistake. gRPC
// (application/grpc, +proto, +json...) never is: it compresses its
// messages itself, and its clients do not take a content coding.
func (p *compressPolicy) typeOK(ct []string) bool {
	if len(ct) == 0 {
		return false
	}
	mt := ct[0]
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.TrimSpace(mt)
	if len(mt) >= len("application/grpc") && strings.EqualFold(mt[:len("application/grpc")], "application/grpc") {
		return false
	}
	for _, t := range p.types {
		if strings.EqualFold(mt, t) {
			return true
		}
	}
	if strings.EqualFold(mt, "text/event-stream") || !strings.Contains(mt, "/") {
		return false
	}
	if p.anyType {
		return true
	}
	for _, pre := range p.prefixes {
		if len(mt) > len(pre) && strings.EqualFold(mt[:len(pre)], pre) {
			return true
		}
	}
	return false
}

// choose returns the algorithm to encode with for a client that accepts
// acc: the highest q-value above 0, the route's order among equals.
func (p *compressPolicy) choose(acc *acceptEncoding) coding {
	best, bestQ := codingNone, 0
	for _, c := range p.algs {
		if q := acc.q(c); q > bestQ {
			best, bestQ = c, q
		}
	}
	return best
}

// acceptEncoding is a request's Accept-Encoding: the q-value, in
// thousandths, of each coding and of "*", -1 for one not listed.
type acceptEncoding struct {
	codings [numCodings]int
	star    int
}

// q is the q-value the client gives coding c: its own, or that of "*".
func (a *acceptEncoding) q(c coding) int {
	if q := a.codings[c]; q >= 0 {
		return q
	}
	return max(a.star, 0)
}

// parseAcceptEncoding reads Accept-Encoding field values (RFC 9110
// 12.5.3), without allocating. An element with a malformed q-value is
// skipped; a coding listed twice keeps its highest q-value. No field at
// all accepts nothing.
func parseAcceptEncoding(vals []string) acceptEncoding {
	a := acceptEncoding{codings: [numCodings]int{-1, -1, -1}, star: -1}
	for _, v := range vals {
		for v != "" {
			var elem string
			elem, v, _ = strings.Cut(v, ",")
			name, params, _ := strings.Cut(elem, ";")
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			q := parseQ(params)
			if q < 0 {
				continue
			}
			if name == "*" {
				a.star = max(a.star, q)
			} else if c := codingOf(name); c != codingNone {
				a.codings[c] = max(a.codings[c], q)
			}
		}
	}
	return a
}

// parseQ returns the weight in parameters params (";q=0.5"), in
// thousandths: 1000 when there is none, -1 when it is malformed.
func parseQ(params string) int {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		p = strings.TrimSpace(p)
		if len(p) < 2 || p[0] != 'q' && p[0] != 'Q' || p[1] != '=' {
			continue
		}
		return qvalue(p[2:])
	}
	return 1000
}

// qvalue parses "0", "0.5", "1", "1.000" (RFC 9110 12.4.2), in
// thousandths; -1 when s is not one.
func qvalue(s string) int {
	if s == "" || len(s) > 5 || s[0] != '0' && s[0] != '1' {
		return -1
	}
	q := int(s[0]-'0') * 1000
	if len(s) == 1 {
		return q
	}
	if s[1] != '.' {
		return -1
	}
	for i, scale := 2, 100; i < len(s); i, scale = i+1, scale/10 {
		d := s[i]
		if d < '0' || d > '9' {
			return -1
		}
		q += int(d-'0') * scale
	}
	if q > 1000 {
		return -1
	}
	return q
}

// coder relays one response body through a decoder, an encoder, or both,
// with the first bytes possibly read already (gather). Coders, their
// encoders and decoders, and their copy buffers are pooled: a compressed
// response allocates none of them.
type coder struct {
	p    *compressPolicy
	in   countingReader // the upstream's body
	src  io.Reader      // what the copy reads: &in, or a decoder over it
	dec  coding
	gz   *gzip.Reader
	zd   *zstd.Decoder
	enc  coding
	ew   *encWriter
	bp   *[]byte
	held int  // (*bp)[:held] was read by gather
	eof  bool // gather saw the end of the body
	// plain counts the identity bytes relayed.
	plain int64
}

var coderPool = sync.Pool{New: func() any { return new(coder) }}

func getCoder(p *compressPolicy, body io.Reader) *coder {
	cd := coderPool.Get().(*coder)
	cd.p, cd.in.r, cd.bp = p, body, h1.GetBuffer()
	cd.src = &cd.in
	return cd
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// gather reads the body until min bytes of it (min is at most the copy
// buffer's size), its end, or an error.
func (cd *coder) gather(min int64) error {
	buf := *cd.bp
	for int64(cd.held) < min {
		n, err := cd.src.Read(buf[cd.held:])
		cd.held += n
		cd.plain += int64(n)
		if err == io.EOF {
			cd.eof = true
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decode sets the coder to decode the body from coding c. A gzip body's
// header is read at once: a broken one is found before the answer goes
// out.
func (cd *coder) decode(c coding) error {
	cd.dec = c
	switch c {
	case codingGzip:
		gz, _ := gzipReaders.Get().(*gzip.Reader)
		if gz == nil {
			gz = new(gzip.Reader)
		}
		cd.gz = gz
		switch err := gz.Reset(&cd.in); {
		case err == io.EOF && cd.in.n.Load() == 0:
			cd.src = http.NoBody // an empty body, which stays empty
			return nil
		case err != nil:
			return err
		}
		cd.src = gz
	case codingZstd:
		zd, _ := zstdDecoders.Get().(*zstd.Decoder)
		if zd == nil {
			var err error
			zd, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(zstdMaxDecodeWindow))
			if err != nil {
				return err
			}
		}
		cd.zd = zd
		if err := zd.Reset(&cd.in); err != nil {
			return err
		}
		cd.src = zd
	}
	return nil
}

var (
	gzipReaders  sync.Pool
	zstdDecoders sync.Pool
)

// encodeWith sets the coder to encode with coding c at level.
func (cd *coder) encodeWith(c coding, level int) {
	cd.enc, cd.ew = c, getEncWriter(c, level)
}

// encWriter is a pooled encoder and the counted writer it writes to;
// the writer's destination is set per response.
type encWriter struct {
	enc interface {
		io.WriteCloser
		Flush() error
		Reset(io.Writer)
	}
	out   countWriter
	level int
}

// encPools hold idle encoders by coding and level; an idle encoder keeps
// its history buffers, and sync.Pool lets the GC take back those not used
// for a while, so memory follows the load.
var encPools [numCodings][numLevels]sync.Pool

func getEncWriter(c coding, level int) *encWriter {
	if ew, ok := encPools[c][level].Get().(*encWriter); ok {
		ew.enc.Reset(&ew.out)
		return ew
	}
	ew := &encWriter{level: level}
	switch c {
	case codingGzip:
		// The level is valid: NewWriterLevel fails on no other error.
		ew.enc, _ = gzip.NewWriterLevel(&ew.out, gzipLevels[level])
	case codingZstd:
		// The options are valid: NewWriter fails on no other error.
		ew.enc, _ = zstd.NewWriter(&ew.out, zstd.WithEncoderLevel(zstdLevels[level]), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(zstdWindow), zstd.WithZeroFrames(true))
	}
	return ew
}

// copy relays the body to w, flushing after each piece when flush is set
// (a stream: the encoder flushes its block too, so what the upstream sent
// reaches the client now). It returns the bytes written to w, and the read
// and the write error apart, as copyBody does, and gives the coder back to
// its pool.
func (cd *coder) copy(w http.ResponseWriter, flush bool) (written int64, rerr, werr error) {
	defer cd.release()
	defer func() { // before release, which clears the count
		if cd.ew != nil {
			written = cd.ew.out.n
		}
	}()
	var fl http.Flusher
	if flush {
		fl, _ = w.(http.Flusher)
	}
	var dst io.Writer = w
	if cd.ew != nil {
		cd.ew.out.w = w
		dst = cd.ew.enc
	}
	buf := *cd.bp
	piece := func(p []byte) error {
		n, err := dst.Write(p)
		if cd.ew == nil {
			written += int64(n)
		}
		if err != nil {
			return err
		}
		if fl != nil {
			if cd.ew != nil {
				if err := cd.ew.enc.Flush(); err != nil {
					return err
				}
			}
			fl.Flush()
		}
		return nil
	}
	if cd.held > 0 {
		if werr = piece(buf[:cd.held]); werr != nil {
			return written, nil, werr
		}
	}
	for !cd.eof {
		n, err := cd.src.Read(buf)
		if n > 0 {
			cd.plain += int64(n)
			if werr = piece(buf[:n]); werr != nil {
				return written, nil, werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return written, err, nil
		}
	}
	if cd.ew != nil {
		if werr = cd.ew.enc.Close(); werr != nil {
			return written, nil, werr
		}
	}
	return written, nil, nil
}

// release counts what the coder did and gives it and its parts back.
func (cd *coder) release() {
	if cd.dec != codingNone {
		cd.p.series[cd.dec][modeDecompress].Count(cd.in.n.Load(), cd.plain)
	}
	if cd.ew != nil {
		cd.p.series[cd.enc][modeCompress].Count(cd.plain, cd.ew.out.n)
		cd.ew.out = countWriter{}
		encPools[cd.enc][cd.ew.level].Put(cd.ew)
	}
	if cd.gz != nil {
		gzipReaders.Put(cd.gz)
	}
	if cd.zd != nil {
		cd.zd.Reset(nil)
		zstdDecoders.Put(cd.zd)
	}
	h1.PutBuffer(cd.bp)
	*cd = coder{}
	coderPool.Put(cd)
}
