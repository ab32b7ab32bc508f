package placeholder

import (
	"reflect"
	"testing"
)

func TestParseSplitsLiteralsAndPlaceholders(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []Part
	}{
		{"", nil},
		{"plain", []Part{{Literal, "plain"}}},
		{"{client_ip}", []Part{{ClientIP, ""}}},
		{"https://{host}{path}", []Part{{Literal, "https://"}, {Host, ""}, {Path, ""}}},
		{"{{x}} y}}", []Part{{Literal, "{x} y}"}}},
		{"a}b", []Part{{Literal, "a}b"}}},
		{"t-{header.x-tenant}", []Part{{Literal, "t-"}, {Header, "X-Tenant"}}},
		{"{{{method}}}", []Part{{Literal, "{"}, {Method, ""}, {Literal, "}"}}},
	} {
		got, err := Parse(c.in)
		if err != nil || !reflect.DeepEqual(got.Parts, c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got.Parts, err, c.want)
		}
	}
}

func TestParseRejectsUnknownAndUnclosedPlaceholders(t *testing.T) {
	for in, want := range map[string]string{
		"{nope}":         "has an unknown placeholder {nope} (known: " + Known + ")",
		"x{host":         `has a "{" at byte 1 that is not closed (write "{{" for a literal "{")`,
		"{header.a b}":   `has placeholder {header.a b}, whose header name "a b" is not a valid header name`,
		"{Host}":         "has an unknown placeholder {Host} (known: " + Known + ")",
		"{header.}{foo}": `has placeholder {header.}, whose header name "" is not a valid header name`,
	} {
		if _, err := Parse(in); err == nil || err.Error() != want {
			t.Errorf("Parse(%q) error = %v, want %q", in, err, want)
		}
	}
}

func TestLiteralUsesAndRender(t *testing.T) {
	lit, _ := Parse("a{{b")
	if s, ok := lit.Literal(); !ok || s != "a{b" {
		t.Errorf("Literal() = %q, %v; want a{b, true", s, ok)
	}
	tm, _ := Parse("{scheme}://{host}/x")
	if _, ok := tm.Literal(); ok {
		t.Error("a template with placeholders reports itself literal")
	}
	if !tm.Uses(Host) || tm.Uses(Endpoint) {
		t.Errorf("Uses: host %v endpoint %v, want true false", tm.Uses(Host), tm.Uses(Endpoint))
	}
	got := tm.Render(func(p Part) string { return map[Kind]string{Scheme: "https", Host: "h"}[p.Kind] })
	if got != "https://h/x" {
		t.Errorf("Render = %q, want https://h/x", got)
	}
	for _, k := range []Kind{ClientIP, Endpoint, Header, Literal} {
		if k.String() == "" {
			t.Errorf("Kind %d has no name", k)
		}
	}
	if ClientIP.String() != "{client_ip}" {
		t.Errorf("ClientIP.String() = %q", ClientIP.String())
	}
}
