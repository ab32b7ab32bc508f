package plane_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// jsonDoc is a compressible JSON document of about n bytes.
func jsonDoc(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"orders":[`)
	for i := 0; b.Len() < n-64; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"status":"shipped","items":[{"sku":"A-%03d","qty":%d}]}`, i, i%997, i%7+1)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// plainClient sends requests as they are written: no Accept-Encoding of
// its own, no decoding.
var plainClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// fetch sends a request with Accept-Encoding ae ("" for none) and returns
// the response with its body read.
func fetch(t *testing.T, c *http.Client, method, url, ae string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ae != "" {
		req.Header.Set("Accept-Encoding", ae)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, body
}

// decode decodes body from coding ce ("" for none).
func decode(t *testing.T, ce string, body []byte) []byte {
	t.Helper()
	var r io.Reader
	switch ce {
	case "":
		return body
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		r = zr
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	default:
		t.Fatalf("unexpected Content-Encoding %q", ce)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s body does not decode: %v", ce, err)
	}
	return out
}

func encode(t *testing.T, ce string, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	switch ce {
	case "gzip":
		zw := gzip.NewWriter(&b)
		zw.Write(body)
		zw.Close()
	case "zstd":
		zw, _ := zstd.NewWriter(&b)
		zw.Write(body)
		zw.Close()
	}
	return b.Bytes()
}

func TestCompressionIsNegotiatedByAcceptEncoding(t *testing.T) {
	doc := jsonDoc(16 << 10)
	be := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Vary", "Origin")
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Length", fmt.Sprint(len(doc)))
		w.Write(doc)
	})
	p := startProxy(t, limitYAML("        compress: {algorithms: [zstd, gzip]}", be.addr()))
	url := p.url("web") + "/orders"
	for _, tc := range []struct {
		ae, want string
	}{
		{"gzip", "gzip"},
		{"gzip, deflate, br, zstd", "zstd"}, // equal q: the route's order
		{"zstd;q=0.5, gzip", "gzip"},        // the client's higher q wins
		{"x-gzip", "gzip"},
		{"zstd;q=0, *", "gzip"}, // q=0 excludes; * takes in the rest
		{"ZSTD;Q=1.000", "zstd"},
		{"*;q=0", ""},
		{"identity", ""},
		{"br", ""},
		{"gzip;q=2", ""}, // a malformed q-value is ignored
		{"", ""},         // no Accept-Encoding: no coding (as nginx and Caddy)
	} {
		resp, body := fetch(t, plainClient, "GET", url, tc.ae)
		ce := resp.Header.Get("Content-Encoding")
		if ce != tc.want {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", tc.ae, ce, tc.want)
			continue
		}
		if got := decode(t, ce, body); !bytes.Equal(got, doc) {
			t.Errorf("Accept-Encoding %q: the body decodes to %d bytes, not the %d the upstream sent", tc.ae, len(got), len(doc))
		}
		if v := resp.Header.Values("Vary"); strings.Join(v, ", ") != "Origin, Accept-Encoding" {
			t.Errorf("Accept-Encoding %q: Vary %q, want the upstream's Origin and Accept-Encoding", tc.ae, v)
		}
		wantETag, wantLen, wantRanges := `"v1"`, int64(len(doc)), "bytes"
		if tc.want != "" {
			// The server may frame a short compressed body with a length of
			// its own; never the upstream's.
			wantETag, wantLen, wantRanges = `W/"v1"`, resp.ContentLength, ""
			if wantLen != -1 && wantLen != int64(len(body)) {
				t.Errorf("Accept-Encoding %q: Content-Length %d for a %d-byte body", tc.ae, wantLen, len(body))
			}
			if len(body) >= len(doc)/3 {
				t.Errorf("Accept-Encoding %q: %d bytes of %s for %d of JSON; it did not compress", tc.ae, len(body), ce, len(doc))
			}
		}
		if e := resp.Header.Get("Etag"); e != wantETag {
			t.Errorf("Accept-Encoding %q: ETag %q, want %q", tc.ae, e, wantETag)
		}
		if resp.ContentLength != wantLen {
			t.Errorf("Accept-Encoding %q: Content-Length %d, want %d", tc.ae, resp.ContentLength, wantLen)
		}
		if ar := resp.Header.Get("Accept-Ranges"); ar != wantRanges {
			t.Errorf("Accept-Encoding %q: Accept-Ranges %q, want %q", tc.ae, ar, wantRanges)
		}
	}

	labels := func(alg string) map[string]string {
		return map[string]string{"listener": "web", "route": "api", "upstream": "app", "algorithm": alg, "mode": "compress"}
	}
	if n := p.metric("switchboard_http_compression_responses_total", labels("gzip")); n != 4 {
		t.Errorf("gzip responses counted %v, want 4", n)
	}
	if n := p.metric("switchboard_http_compression_in_bytes_total", labels("zstd")); n != float64(2*len(doc)) {
		t.Errorf("zstd input bytes %v, want %d (two responses)", n, 2*len(doc))
	}
	if in, out := p.metric("switchboard_http_compression_in_bytes_total", labels("gzip")),
		p.metric("switchboard_http_compression_out_bytes_total", labels("gzip")); out <= 0 || out >= in/3 {
		t.Errorf("gzip bytes in %v, out %v: want out a fraction of in", in, out)
	}
}

func TestCompressionLeavesAloneWhatItMustNot(t *testing.T) {
	doc := jsonDoc(4 << 10)
	gz := encode(t, "gzip", doc)
	be := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/small":
			w.Write(doc[:1000])
		case "/small-chunked":
			w.Write(doc[:500])
			w.(http.Flusher).Flush()
			w.Write(doc[500:1000])
		case "/png":
			h.Set("Content-Type", "image/png")
			w.Write(doc)
		case "/untyped":
			h["Content-Type"] = nil
			w.Write(doc)
		case "/events":
			h.Set("Content-Type", "text/event-stream")
			w.Write(doc)
		case "/html":
			h.Set("Content-Type", "text/html")
			w.Write(doc)
		case "/encoded":
			h.Set("Content-Encoding", "gzip")
			w.Write(gz)
		case "/range":
			h.Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(doc)-1, len(doc)*2))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(doc)
		case "/no-transform":
			h.Set("Cache-Control", "public, no-transform")
			w.Write(doc)
		case "/no-content":
			w.WriteHeader(http.StatusNoContent)
		case "/not-modified":
			h.Set("ETag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Write(doc)
		}
	})
	p := startProxy(t, limitYAML("        compress: {algorithms: [gzip], min_size: 1KiB, content_types: [application/json, text/*]}", be.addr()))
	for _, tc := range []struct {
		path   string
		want   string
		status int
	}{
		{"/small", "", 200},         // 1000 bytes by Content-Length, under 1KiB
		{"/small-chunked", "", 200}, // unknown length: read up to min_size, ended under it
		{"/png", "", 200},
		{"/untyped", "", 200},
		{"/events", "", 200}, // text/* does not take in server-sent events
		{"/html", "gzip", 200},
		{"/encoded", "gzip", 200}, // the upstream's gzip, not encoded twice
		{"/range", "", 206},
		{"/no-transform", "", 200},
		{"/no-content", "", 204},
		{"/not-modified", "", 304},
		{"/json", "gzip", 200},
	} {
		resp, body := fetch(t, plainClient, "GET", p.url("web")+tc.path, "gzip, zstd")
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
		ce := resp.Header.Get("Content-Encoding")
		if ce != tc.want {
			t.Errorf("%s: Content-Encoding %q, want %q", tc.path, ce, tc.want)
			continue
		}
		switch tc.path {
		case "/encoded":
			if !bytes.Equal(body, gz) {
				t.Errorf("/encoded: the upstream's gzip body was changed")
			}
		case "/small", "/small-chunked":
			if !bytes.Equal(body, doc[:1000]) {
				t.Errorf("%s: body changed", tc.path)
			}
		case "/no-content", "/not-modified":
		default:
			if got := decode(t, ce, body); !bytes.Equal(got, doc) {
				t.Errorf("%s: body decodes to %d bytes, want the upstream's %d", tc.path, len(got), len(doc))
			}
		}
	}

	// A request for a range that the upstream answers whole is compressed
	// like any other.
	resp, body := fetch(t, plainClient, "GET", p.url("web")+"/json", "gzip", "Range", "bytes=0-99")
	if ce := resp.Header.Get("Content-Encoding"); resp.StatusCode != 200 || ce != "gzip" || !bytes.Equal(decode(t, ce, body), doc) {
		t.Errorf("a Range request answered 200: status %d, Content-Encoding %q; want the whole body in gzip", resp.StatusCode, ce)
	}
}

func TestCompressionGivesHeadTheHeadersOfGet(t *testing.T) {
	doc := jsonDoc(4 << 10)
	be := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(doc)))
		w.Header().Set("ETag", `"v1"`)
		if r.Method != http.MethodHead {
			w.Write(doc)
		}
	})
	p := startProxy(t, limitYAML("        compress: {}", be.addr()))
	get, _ := fetch(t, plainClient, "GET", p.url("web")+"/", "gzip")
	head, body := fetch(t, plainClient, "HEAD", p.url("web")+"/", "gzip")
	for _, k := range []string{"Content-Encoding", "Vary", "Etag"} {
		if g, h := get.Header.Get(k), head.Header.Get(k); g != h {
			t.Errorf("%s: GET has %q, HEAD %q; want the same", k, g, h)
		}
	}
	if head.Header.Get("Content-Encoding") != "gzip" || len(body) != 0 {
		t.Errorf("HEAD: Content-Encoding %q and %d body bytes, want gzip and none", head.Header.Get("Content-Encoding"), len(body))
	}
	if cl := head.Header.Get("Content-Length"); cl != "" {
		t.Errorf("HEAD: Content-Length %q, the identity body's; want none, as the compressed length is not known", cl)
	}
}

func TestCompressedStreamIsDeliveredAsItComes(t *testing.T) {
	for _, alg := range []string{"gzip", "zstd"} {
		t.Run(alg, func(t *testing.T) {
			first, second := jsonDoc(2<<10), jsonDoc(3<<10)
			release := make(chan struct{})
			be := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write(first)
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Second):
					return // the test failed; do not hold the server's Close
				}
				w.Write(second)
			})
			p := startProxy(t, limitYAML("        compress: {min_size: 1KiB}", be.addr()))
			req, _ := http.NewRequest("GET", p.url("web")+"/watch", nil)
			req.Header.Set("Accept-Encoding", alg)
			resp, err := plainClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ce := resp.Header.Get("Content-Encoding"); ce != alg {
				close(release)
				t.Fatalf("Content-Encoding %q, want %q", ce, alg)
			}
			var dec io.Reader
			if alg == "gzip" {
				zr, err := gzip.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				dec = zr
			} else {
				zr, err := zstd.NewReader(resp.Body, zstd.WithDecoderConcurrency(1))
				if err != nil {
					t.Fatal(err)
				}
				defer zr.Close()
				dec = zr
			}
			// The first piece decodes while the upstream still holds the
			// rest: the proxy flushed the encoder and the connection.
			got := make([]byte, len(first))
			if _, err := io.ReadFull(dec, got); err != nil || !bytes.Equal(got, first) {
				close(release)
				t.Fatalf("first piece: %v (equal: %v)", err, bytes.Equal(got, first))
			}
			close(release)
			rest, err := io.ReadAll(dec)
			if err != nil || !bytes.Equal(rest, second) {
				t.Fatalf("second piece: %v, %d bytes, want %d", err, len(rest), len(second))
			}
		})
	}
}

func TestDecompressionForClientsThatDoNotAccept(t *testing.T) {
	doc := jsonDoc(8 << 10)
	gz, zs := encode(t, "gzip", doc), encode(t, "zstd", doc)
	be := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", `"v1"`)
		switch r.URL.Path[strings.LastIndexByte(r.URL.Path, '/'):] {
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz)
		case "/zstd":
			w.Header().Set("Content-Encoding", "zstd")
			w.Write(zs)
		case "/empty-gzip":
			w.Header().Set("Content-Encoding", "gzip")
		case "/empty-zstd":
			w.Header().Set("Content-Encoding", "zstd")
		case "/broken":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte("this is not gzip"))
		}
	})
	p := startProxy(t, `admin: {enabled: false}
listeners:
  - name: web
    listen: 127.0.0.1:0
    routes:
      - name: plain
        match: {path_prefix: /plain/}
        upstream: app
        decompress: true
      - name: both
        match: {path_prefix: /both/}
        upstream: app
        decompress: true
        compress: {algorithms: [gzip]}
upstreams:
  app:
    targets: [{address: `+be.addr()+`}]
`)
	for _, tc := range []struct {
		path, ae, want string
		body           []byte // the bytes expected as sent, nil: doc once decoded
	}{
		{"/plain/gzip", "", "", nil},
		{"/plain/zstd", "", "", nil},
		{"/plain/zstd", "gzip", "", nil},
		{"/plain/gzip", "gzip", "gzip", gz}, // accepted: as the upstream sent it
		{"/plain/zstd", "zstd;q=0.1", "zstd", zs},
		{"/both/zstd", "gzip", "gzip", nil}, // decoded, then encoded as the client accepts
		{"/both/zstd", "", "", nil},
	} {
		resp, body := fetch(t, plainClient, "GET", p.url("web")+tc.path, tc.ae)
		ce := resp.Header.Get("Content-Encoding")
		if resp.StatusCode != 200 || ce != tc.want {
			t.Errorf("%s with Accept-Encoding %q: status %d, Content-Encoding %q; want 200, %q", tc.path, tc.ae, resp.StatusCode, ce, tc.want)
			continue
		}
		if tc.body != nil {
			if !bytes.Equal(body, tc.body) {
				t.Errorf("%s with Accept-Encoding %q: the upstream's body was changed", tc.path, tc.ae)
			}
		} else if got := decode(t, ce, body); !bytes.Equal(got, doc) {
			t.Errorf("%s with Accept-Encoding %q: body is %d bytes once decoded, want the document's %d", tc.path, tc.ae, len(got), len(doc))
		}
		wantETag := `"v1"`
		if tc.body == nil {
			wantETag = `W/"v1"`
		}
		if e := resp.Header.Get("Etag"); e != wantETag {
			t.Errorf("%s with Accept-Encoding %q: ETag %q, want %q", tc.path, tc.ae, e, wantETag)
		}
		if v := resp.Header.Get("Vary"); v != "Accept-Encoding" {
			t.Errorf("%s with Accept-Encoding %q: Vary %q, want Accept-Encoding", tc.path, tc.ae, v)
		}
	}

	for _, path := range []string{"/plain/empty-gzip", "/plain/empty-zstd"} {
		resp, body := fetch(t, plainClient, "GET", p.url("web")+path, "")
		if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s: status %d, %d bytes, Content-Encoding %q; want an empty 200 without coding",
				path, resp.StatusCode, len(body), resp.Header.Get("Content-Encoding"))
		}
	}

	resp, body := fetch(t, plainClient, "GET", p.url("web")+"/plain/broken", "")
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Switchboard-Error") == "" {
		t.Errorf("a gzip body with a broken header: status %d, error header %q; want 502 from the proxy (body %s)",
			resp.StatusCode, resp.Header.Get("X-Switchboard-Error"), body)
	}

	labels := map[string]string{"route": "plain", "algorithm": "zstd", "mode": "decompress"}
	if in, out := p.metric("switchboard_http_compression_in_bytes_total", labels),
		p.metric("switchboard_http_compression_out_bytes_total", labels); in != float64(2*len(zs)) || out != float64(2*len(doc)) {
		t.Errorf("zstd decompression counted %v bytes in and %v out, want %d and %d", in, out, 2*len(zs), 2*len(doc))
	}
}

func TestCompressionOverHTTP2(t *testing.T) {
	doc := jsonDoc(16 << 10)
	be := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(doc)
	})
	p := startProxy(t, withTLS(t, limitYAML("        compress: {}", be.addr())))
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, DisableCompression: true,
	}}
	for _, alg := range []string{"zstd", "gzip"} {
		resp, body := fetch(t, c, "GET", "https://"+p.srv.Addr("web")+"/", alg)
		if resp.ProtoMajor != 2 {
			t.Fatalf("the client spoke %s, want HTTP/2", resp.Proto)
		}
		if ce := resp.Header.Get("Content-Encoding"); ce != alg || !bytes.Equal(decode(t, ce, body), doc) {
			t.Errorf("over HTTP/2 with Accept-Encoding %s: Content-Encoding %q, %d bytes; want the document in %s", alg, ce, len(body), alg)
		}
	}
}

// TestDecompressionOfABombIsStreamed sends a client that does not accept
// gzip or zstd a small upstream answer that decodes to 32 MiB: the proxy
// decodes it as it streams, so what the whole process allocates for the
// request stays a small fraction of the expansion (the copy buffer, and
// for zstd the frame's window).
func TestDecompressionOfABombIsStreamed(t *testing.T) {
	const expanded = 32 << 20
	zeros := make([]byte, expanded)
	// A zstd decoder holds up to the frame's window (at most 8 MiB, as
	// RFC 9659 has it): this one's is 1 MiB, as the proxy's own encoder's.
	var zs bytes.Buffer
	zw, _ := zstd.NewWriter(&zs, zstd.WithWindowSize(1<<20))
	zw.Write(zeros)
	zw.Close()
	bombs := map[string][]byte{"gzip": encode(t, "gzip", zeros), "zstd": zs.Bytes()}
	be := newBackend(t, "app", func(w http.ResponseWriter, r *http.Request) {
		alg := strings.TrimPrefix(r.URL.Path, "/")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Encoding", alg)
		w.Write(bombs[alg])
	})
	p := startProxy(t, limitYAML("        decompress: true", be.addr()))
	for alg, bomb := range bombs {
		fetch(t, plainClient, "GET", p.url("web")+"/"+alg, "") // warm the pools
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		resp, err := plainClient.Get(p.url("web") + "/" + alg)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		runtime.ReadMemStats(&after)
		if err != nil || n != expanded || resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%s bomb of %d bytes: got %d bytes (%v), Content-Encoding %q; want %d decoded", alg, len(bomb), n, err, resp.Header.Get("Content-Encoding"), expanded)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes decoded to %d; %d bytes allocated", alg, len(bomb), n, alloc)
		if alloc > expanded/8 {
			t.Errorf("%s: decoding a %d-byte body to %d bytes allocated %d bytes in the process; want it streamed (under %d)",
				alg, len(bomb), expanded, alloc, expanded/8)
		}
	}
}
