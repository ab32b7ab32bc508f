package httpproxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/", "/", true},
		{"/a/b", "/a/b", true},
		{"/a/b/", "/a/b/", true},
		{"/public/../admin/secret.txt", "/admin/secret.txt", true},
		{"/public/%2e%2e/admin/secret.txt", "/admin/secret.txt", true},
		{"/public/%2E%2e/admin", "/admin", true},
		{"/public/.%2e/admin", "/admin", true},
		{"/public/./x", "/public/x", true},
		{"//a//b", "/a/b", true},
		{"/a///b/../../c", "/c", true}, // slashes merge first, as in nginx
		{"/a/b/..", "/a/", true},
		{"/a/b/.", "/a/b/", true},
		{"/a/.", "/a/", true},
		{"/.", "/", true},
		{"//", "/", true},
		{"/a/..", "/", true},
		{"/..", "", false},
		{"/../a", "", false},
		{"/a/../..", "", false},
		{"/a/%2e%2e/%2e%2e/b", "", false},
		{"/%7Euser/%41%62c", "/~user/Abc", true},
		{"/a%2Fb/%2e%2e%2Fadmin", "/a%2Fb/..%2Fadmin", true}, // an encoded slash is data
		{"/a%5C..%5Cb", "/a%5C..%5Cb", true},
		{"/caf%C3%A9/%20x", "/caf%C3%A9/%20x", true},
		{"/a%zz", "", false},
		{"/a%2", "", false},
		{"/...", "/...", true},
		{"/a..b/.c/c.", "/a..b/.c/c.", true},
	} {
		got, ok := normalizePath(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("normalizePath(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestNormalizePathOfANormalPathAllocatesNothing holds the hot path to no
// allocation: almost every path is already normal.
func TestNormalizePathOfANormalPathAllocatesNothing(t *testing.T) {
	for _, p := range []string{"/", "/bench", "/api/v1/orders/42", "/a/b/", "/caf%C3%A9/%2F", "/a..b/.c"} {
		if n := testing.AllocsPerRun(100, func() { normalizePath(p) }); n != 0 {
			t.Errorf("normalizePath(%q) allocates %v times", p, n)
		}
		r, _ := http.NewRequest("GET", "http://h"+p+"?q=1", nil)
		r.RequestURI = p + "?q=1"
		if n := testing.AllocsPerRun(100, func() { normalizeRequest(r) }); n != 0 {
			t.Errorf("normalizeRequest(%q) allocates %v times", p, n)
		}
	}
}

func TestNormalizeRequestKeepsTheQueryAndAgreesWithItself(t *testing.T) {
	for _, tc := range []struct {
		target                   string
		path, rawPath, targetOut string
	}{
		{"/public/%2e%2e/admin/x?a=%2e%2e&b=..//", "/admin/x", "", "/admin/x?a=%2e%2e&b=..//"},
		{"//a//b?", "/a/b", "", "/a/b?"},
		{"/a/./b%2Fc", "/a/b/c", "/a/b%2Fc", "/a/b%2Fc"},
		{"http://h.example/x/../y?q", "/y", "", "/y?q"},
		{"http://h.example", "/", "", "/"},
	} {
		r, err := http.ReadRequest(bufioReader("GET " + tc.target + " HTTP/1.1\r\nHost: h.example\r\n\r\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		if !normalizeRequest(r) {
			t.Fatalf("%s: refused", tc.target)
		}
		if r.URL.Path != tc.path || r.URL.RawPath != tc.rawPath || r.RequestURI != tc.targetOut {
			t.Errorf("%s: Path %q RawPath %q RequestURI %q; want %q %q %q", tc.target, r.URL.Path, r.URL.RawPath, r.RequestURI, tc.path, tc.rawPath, tc.targetOut)
		}
		if got := r.URL.RequestURI(); got != tc.targetOut {
			t.Errorf("%s: URL.RequestURI() = %q, want %q (the h2c upstream's target)", tc.target, got, tc.targetOut)
		}
	}
}

// FuzzNormalizePath: the normal form is a fixed point, starts with "/",
// and has no empty, "." or ".." segment and no encoded unreserved byte.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "//x//y/", "/%2e%2E/", "/a%2Fb", "/.%2e", "/a/b/c/../../.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !strings.HasPrefix(p, "/") {
			return
		}
		n, ok := normalizePath(p)
		if !ok {
			return
		}
		if !strings.HasPrefix(n, "/") || needsNormalizing(n) {
			t.Fatalf("normalizePath(%q) = %q, not normal", p, n)
		}
		if again, ok := normalizePath(n); !ok || again != n {
			t.Fatalf("normalizePath(%q) = %q, but that gives %q, %v", p, n, again, ok)
		}
	})
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
