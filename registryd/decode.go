package registryd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on one registration. Meta's limits are Consul's (Consul docs,
// services configuration reference: "Meta ... up to 64 key/value pairs,
// keys up to 128 characters, values up to 512 characters, keys must not
// start with consul-"); the others bound memory per registration.
const (
	maxNameLen      = 256
	maxTags         = 256
	maxTagLen       = 256
	maxMetaPairs    = 64
	maxMetaKeyLen   = 128
	maxMetaValueLen = 512
	maxChecks       = 32
	maxHeaders      = 64
	maxCheckBodyLen = 64 << 10
	// maxOutput is Consul's default check_output_max_size.
	maxOutput = 4096
)

// Check statuses, as Consul writes them.
const (
	statusPassing  = "passing"
	statusWarning  = "warning"
	statusCritical = "critical"
)

// Check types, as Consul reports them in HealthCheck.Type.
const (
	typeTTL  = "ttl"
	typeHTTP = "http"
	typeTCP  = "tcp"
)

// fieldError is a bad registration: Field names what is wrong in the
// caller's terms ("Check.TTL", "Checks[1].Interval", "Port").
type fieldError struct {
	Field string
	Msg   string
}

func (e *fieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func fieldErr(field, format string, args ...any) error {
	return &fieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Weights is Consul's service weights: the relative DNS SRV weight of an
// instance while passing and while warning.
type Weights struct {
	Passing int
	Warning int
}

// serviceDef is one validated service registration: what the caller sent,
// with defaults applied (ID from Name, check IDs and names, weights).
type serviceDef struct {
	ID                string
	Name              string
	Address           string
	Port              int
	Tags              []string
	Meta              map[string]string
	Weights           Weights
	EnableTagOverride bool
	Checks            []checkDef
}

// checkDef is one validated check definition.
type checkDef struct {
	CheckID string
	Name    string
	Notes   string
	// Type is typeTTL, typeHTTP or typeTCP.
	Type string `json:"-"`

	TTL      duration `json:",omitempty"`
	HTTP     string   `json:",omitempty"`
	TCP      string   `json:",omitempty"`
	Interval duration `json:",omitempty"`
	Timeout  duration `json:",omitempty"`

	Method           string              `json:",omitempty"`
	Header           map[string][]string `json:",omitempty"`
	Body             string              `json:",omitempty"`
	TLSServerName    string              `json:",omitempty"`
	TLSSkipVerify    bool                `json:",omitempty"`
	DisableRedirects bool                `json:",omitempty"`

	// Status is the initial status ("" means critical, Consul's default).
	Status                         string   `json:",omitempty"`
	DeregisterCriticalServiceAfter duration `json:",omitempty"`
}

// duration is a time.Duration that marshals as Go duration text ("10s"),
// the form Consul documents for Interval, Timeout and TTL.
type duration time.Duration

func (d duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// object is a JSON object whose keys are matched the way Consul matches
// them: case-insensitively and with snake_case aliases
// ("deregister_critical_service_after"), so python-consul's lowercase keys
// and the Go client's CamelCase keys mean the same.
type object struct {
	path string
	m    map[string]json.RawMessage
	used map[string]bool
}

func normKey(k string) string { return strings.ToLower(strings.ReplaceAll(k, "_", "")) }

func parseObject(raw json.RawMessage, path, what string) (*object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fieldErr(path, "expected a JSON object%s, got %s", what, jsonKind(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fieldErr(path, "invalid JSON: %v", err)
	}
	o := &object{path: path, m: make(map[string]json.RawMessage, len(m)), used: map[string]bool{}}
	orig := make(map[string]string, len(m))
	for k, v := range m {
		n := normKey(k)
		if prev, dup := orig[n]; dup {
			return nil, fieldErr(o.field(k), "given twice (as %q and %q)", prev, k)
		}
		orig[n] = k
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue // null is absent, as for Consul's decoder
		}
		o.m[n] = v
	}
	return o, nil
}

func (o *object) field(name string) string {
	if o.path == "" {
		return name
	}
	return o.path + "." + name
}

// get returns the raw value of the field called name (CamelCase, as Consul
// documents it), or nil.
func (o *object) get(name string) json.RawMessage {
	return o.m[normKey(name)]
}

func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func (o *object) str(name string) (string, error) {
	raw := o.get(name)
	if raw == nil {
		return "", nil
	}
	var s string
	if jsonKind(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
		return "", fieldErr(o.field(name), "expected a string, got %s", jsonKind(raw))
	}
	return s, nil
}

func (o *object) boolean(name string) (bool, error) {
	raw := o.get(name)
	if raw == nil {
		return false, nil
	}
	var b bool
	if json.Unmarshal(raw, &b) != nil {
		return false, fieldErr(o.field(name), "expected true or false, got %s", jsonKind(raw))
	}
	return b, nil
}

func (o *object) integer(name string) (int, bool, error) {
	raw := o.get(name)
	if raw == nil {
		return 0, false, nil
	}
	var f json.Number
	if jsonKind(raw) != "a number" || json.Unmarshal(raw, &f) != nil {
		return 0, false, fieldErr(o.field(name), "expected a number, got %s", jsonKind(raw))
	}
	n, err := strconv.ParseInt(f.String(), 10, 64)
	if err != nil || n < math.MinInt32 || n > math.MaxInt32 {
		return 0, false, fieldErr(o.field(name), "%s is not a whole number in range", f)
	}
	return int(n), true, nil
}

// dur parses a duration given as Go duration text ("10s") or, as Consul also
// accepts, a number of nanoseconds.
func (o *object) dur(name string) (time.Duration, bool, error) {
	raw := o.get(name)
	if raw == nil {
		return 0, false, nil
	}
	var d time.Duration
	switch jsonKind(raw) {
	case "a string":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false, fieldErr(o.field(name), "invalid string: %v", err)
		}
		if s == "" {
			return 0, false, nil
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, false, fieldErr(o.field(name), "%q is not a duration (use Go duration text such as \"10s\" or \"1m30s\")", s)
		}
		d = v
	case "a number":
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || f > math.MaxInt64 || f < math.MinInt64 {
			return 0, false, fieldErr(o.field(name), "%s is not a duration in nanoseconds", raw)
		}
		d = time.Duration(f)
	default:
		return 0, false, fieldErr(o.field(name), "expected a duration string such as \"10s\", got %s", jsonKind(raw))
	}
	if d < 0 {
		return 0, false, fieldErr(o.field(name), "%v must not be negative", d)
	}
	return d, true, nil
}

func (o *object) strings(name string) ([]string, error) {
	raw := o.get(name)
	if raw == nil {
		return nil, nil
	}
	var ss []string
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &ss) != nil {
		return nil, fieldErr(o.field(name), "expected an array of strings, got %s", jsonKind(raw))
	}
	return ss, nil
}

func (o *object) stringMap(name string) (map[string]string, error) {
	raw := o.get(name)
	if raw == nil {
		return nil, nil
	}
	var m map[string]string
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &m) != nil {
		return nil, fieldErr(o.field(name), "expected an object of string values, got %s", kindOfMap(raw))
	}
	return m, nil
}

func kindOfMap(raw json.RawMessage) string {
	if jsonKind(raw) == "an object" {
		return "an object with a non-string value"
	}
	return jsonKind(raw)
}

// unsupported rejects a Consul feature the embedded registry does not
// implement when the caller gave it a non-empty value: accepting it would be
// a silent success.
func (o *object) unsupported(name, what string) error {
	raw := o.get(name)
	if raw == nil || isZeroJSON(raw) {
		return nil
	}
	return fieldErr(o.field(name), "not supported by the embedded registry (%s)", what)
}

func isZeroJSON(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case `""`, "false", "0", "{}", "[]", "null":
		return true
	}
	return false
}

// decodeService decodes and validates a registration body
// (PUT /v1/agent/service/register). It either returns a complete, valid
// definition or an error naming the field; it never returns half a result.
func decodeService(body []byte) (serviceDef, error) {
	var d serviceDef
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		return d, fieldErr("", "request body is not valid JSON: %v", err)
	}
	o, err := parseObject(body, "", " (the service definition)")
	if err != nil {
		return d, err
	}
	for _, u := range []struct{ name, what string }{
		{"Kind", "service kinds (Connect proxies and gateways)"},
		{"Proxy", "Connect proxy configuration"},
		{"Connect", "Connect"},
		{"SocketPath", "a Unix socket path"},
		{"TaggedAddresses", "tagged addresses"},
		{"Ports", "named ports"},
		{"Locality", "locality"},
	} {
		if err := o.unsupported(u.name, u.what); err != nil {
			return d, err
		}
	}
	for _, name := range []string{"Namespace", "Partition"} {
		if s, err := o.str(name); err != nil {
			return d, err
		} else if s != "" && s != "default" {
			return d, fieldErr(name, "%q: only the default %s exists in the embedded registry", s, strings.ToLower(name))
		}
	}
	if d.Name, err = o.str("Name"); err != nil {
		return d, err
	}
	if d.Name == "" {
		return d, fieldErr("Name", "is required")
	}
	if err := checkName(d.Name); err != nil {
		return d, fieldErr("Name", "%v", err)
	}
	if d.ID, err = o.str("ID"); err != nil {
		return d, err
	}
	if d.ID == "" {
		d.ID = d.Name // Consul: "ID ... defaults to the Name"
	} else if err := checkName(d.ID); err != nil {
		return d, fieldErr("ID", "%v", err)
	}
	if d.Address, err = o.str("Address"); err != nil {
		return d, err
	}
	if len(d.Address) > maxNameLen || strings.ContainsFunc(d.Address, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return d, fieldErr("Address", "%q is not a host name or IP address", d.Address)
	}
	port, _, err := o.integer("Port")
	if err != nil {
		return d, err
	}
	if port < 0 || port > 65535 {
		return d, fieldErr("Port", "%d is out of range 0-65535", port)
	}
	d.Port = port
	if d.Tags, err = o.strings("Tags"); err != nil {
		return d, err
	}
	if len(d.Tags) > maxTags {
		return d, fieldErr("Tags", "%d tags, at most %d allowed", len(d.Tags), maxTags)
	}
	for i, t := range d.Tags {
		if len(t) > maxTagLen || !utf8.ValidString(t) {
			return d, fieldErr(fmt.Sprintf("Tags[%d]", i), "must be valid UTF-8 of at most %d bytes", maxTagLen)
		}
	}
	if d.Meta, err = o.stringMap("Meta"); err != nil {
		return d, err
	}
	if err := checkMeta(d.Meta); err != nil {
		return d, err
	}
	d.Weights = Weights{Passing: 1, Warning: 1} // Consul's default weights
	if raw := o.get("Weights"); raw != nil {
		w, err := parseObject(raw, "Weights", "")
		if err != nil {
			return d, err
		}
		if p, ok, err := w.integer("Passing"); err != nil {
			return d, err
		} else if ok {
			if p < 1 {
				return d, fieldErr("Weights.Passing", "%d must be at least 1", p)
			}
			d.Weights.Passing = p
		}
		if v, ok, err := w.integer("Warning"); err != nil {
			return d, err
		} else if ok {
			if v < 0 {
				return d, fieldErr("Weights.Warning", "%d must not be negative", v)
			}
			d.Weights.Warning = v
		}
	}
	if d.EnableTagOverride, err = o.boolean("EnableTagOverride"); err != nil {
		return d, err
	}

	var raws []json.RawMessage
	var paths []string
	if raw := o.get("Check"); raw != nil {
		raws = append(raws, raw)
		paths = append(paths, "Check")
	}
	if raw := o.get("Checks"); raw != nil {
		var list []json.RawMessage
		if jsonKind(raw) != "an array" || json.Unmarshal(raw, &list) != nil {
			return d, fieldErr("Checks", "expected an array of check objects, got %s", jsonKind(raw))
		}
		for i, r := range list {
			raws = append(raws, r)
			paths = append(paths, fmt.Sprintf("Checks[%d]", i))
		}
	}
	if len(raws) > maxChecks {
		return d, fieldErr("Checks", "%d checks, at most %d allowed", len(raws), maxChecks)
	}
	seen := map[string]string{}
	for i, raw := range raws {
		c, err := decodeCheck(raw, paths[i])
		if err != nil {
			return d, err
		}
		// Consul's default check IDs: "service:<id>", numbered from 1 when
		// the service has several checks.
		if c.CheckID == "" {
			c.CheckID = "service:" + d.ID
			if len(raws) > 1 {
				c.CheckID += ":" + strconv.Itoa(i+1)
			}
		}
		if c.Name == "" {
			c.Name = "Service '" + d.Name + "' check"
		}
		if prev, dup := seen[c.CheckID]; dup {
			return d, fieldErr(paths[i]+".CheckID", "%q is also the ID of %s", c.CheckID, prev)
		}
		seen[c.CheckID] = paths[i]
		d.Checks = append(d.Checks, c)
	}
	return d, nil
}

func decodeCheck(raw json.RawMessage, path string) (checkDef, error) {
	var c checkDef
	o, err := parseObject(raw, path, " (a check definition)")
	if err != nil {
		return c, err
	}
	for _, u := range []struct{ name, what string }{
		{"Script", "script checks"},
		{"ScriptArgs", "script checks"},
		{"Args", "script checks"},
		{"DockerContainerID", "Docker checks"},
		{"Shell", "Docker checks"},
		{"GRPC", "gRPC checks"},
		{"GRPCUseTLS", "gRPC checks"},
		{"H2PING", "HTTP/2 ping checks"},
		{"H2PingUseTLS", "HTTP/2 ping checks"},
		{"UDP", "UDP checks"},
		{"OSService", "OS service checks"},
		{"AliasNode", "alias checks"},
		{"AliasService", "alias checks"},
		{"TCPUseTLS", "TLS TCP checks"},
		{"SuccessBeforePassing", "success/failure thresholds"},
		{"FailuresBeforeWarning", "success/failure thresholds"},
		{"FailuresBeforeCritical", "success/failure thresholds"},
		{"ServiceID", "ServiceID in a service's own check"},
	} {
		if err := o.unsupported(u.name, u.what); err != nil {
			return c, err
		}
	}
	if c.CheckID, err = o.str("CheckID"); err != nil {
		return c, err
	}
	if c.CheckID == "" {
		if c.CheckID, err = o.str("ID"); err != nil { // Consul accepts "ID" too
			return c, err
		}
	}
	if c.CheckID != "" {
		if err := checkName(c.CheckID); err != nil {
			return c, fieldErr(o.field("CheckID"), "%v", err)
		}
	}
	if c.Name, err = o.str("Name"); err != nil {
		return c, err
	}
	if len(c.Name) > maxNameLen {
		return c, fieldErr(o.field("Name"), "longer than %d bytes", maxNameLen)
	}
	if c.Notes, err = o.str("Notes"); err != nil {
		return c, err
	}
	if len(c.Notes) > maxOutput {
		return c, fieldErr(o.field("Notes"), "longer than %d bytes", maxOutput)
	}
	if c.Status, err = o.str("Status"); err != nil {
		return c, err
	}
	switch c.Status {
	case "", statusPassing, statusWarning, statusCritical:
	default:
		return c, fieldErr(o.field("Status"), "%q is not passing, warning or critical", c.Status)
	}
	ttl, hasTTL, err := o.dur("TTL")
	if err != nil {
		return c, err
	}
	if c.HTTP, err = o.str("HTTP"); err != nil {
		return c, err
	}
	if c.TCP, err = o.str("TCP"); err != nil {
		return c, err
	}
	interval, _, err := o.dur("Interval")
	if err != nil {
		return c, err
	}
	timeout, _, err := o.dur("Timeout")
	if err != nil {
		return c, err
	}
	dcsa, _, err := o.dur("DeregisterCriticalServiceAfter")
	if err != nil {
		return c, err
	}
	c.DeregisterCriticalServiceAfter = duration(dcsa)

	kinds := 0
	for _, set := range []bool{hasTTL, c.HTTP != "", c.TCP != ""} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return c, fieldErr(path, "exactly one of TTL, HTTP and TCP must be set (got %d); the embedded registry supports TTL, HTTP and TCP checks", kinds)
	}
	switch {
	case hasTTL:
		c.Type = typeTTL
		if ttl <= 0 {
			return c, fieldErr(o.field("TTL"), "must be greater than 0")
		}
		c.TTL = duration(ttl)
		if interval != 0 {
			return c, fieldErr(o.field("Interval"), "does not apply to a TTL check")
		}
	case c.HTTP != "":
		c.Type = typeHTTP
		u, err := url.Parse(c.HTTP)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fieldErr(o.field("HTTP"), "%q is not an http:// or https:// URL", c.HTTP)
		}
		if c.Method, err = o.str("Method"); err != nil {
			return c, err
		}
		if c.Method != "" && strings.ContainsFunc(c.Method, func(r rune) bool { return r < 'A' || r > 'Z' }) {
			return c, fieldErr(o.field("Method"), "%q is not an HTTP method", c.Method)
		}
		if c.Body, err = o.str("Body"); err != nil {
			return c, err
		}
		if len(c.Body) > maxCheckBodyLen {
			return c, fieldErr(o.field("Body"), "longer than %d bytes", maxCheckBodyLen)
		}
		if c.TLSServerName, err = o.str("TLSServerName"); err != nil {
			return c, err
		}
		if c.TLSSkipVerify, err = o.boolean("TLSSkipVerify"); err != nil {
			return c, err
		}
		if c.DisableRedirects, err = o.boolean("DisableRedirects"); err != nil {
			return c, err
		}
		if raw := o.get("Header"); raw != nil {
			var h map[string][]string
			if jsonKind(raw) != "an object" || json.Unmarshal(raw, &h) != nil {
				return c, fieldErr(o.field("Header"), "expected an object of string arrays, got %s", kindOfMap(raw))
			}
			if len(h) > maxHeaders {
				return c, fieldErr(o.field("Header"), "%d headers, at most %d allowed", len(h), maxHeaders)
			}
			for k, vs := range h {
				if k == "" || strings.ContainsAny(k, " \t\r\n:") {
					return c, fieldErr(o.field("Header"), "%q is not a header name", k)
				}
				for _, v := range vs {
					if strings.ContainsAny(v, "\r\n") {
						return c, fieldErr(o.field("Header"), "value of %q contains a line break", k)
					}
				}
			}
			if len(h) > 0 {
				c.Header = h
			}
		}
	case c.TCP != "":
		c.Type = typeTCP
		host, port, err := net.SplitHostPort(c.TCP)
		p, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
			return c, fieldErr(o.field("TCP"), "%q is not host:port", c.TCP)
		}
	}
	if c.Type != typeTTL {
		if interval <= 0 {
			return c, fieldErr(o.field("Interval"), "is required for %s checks and must be greater than 0", strings.ToUpper(c.Type))
		}
		c.Interval = duration(interval)
		c.Timeout = duration(timeout)
	} else if timeout != 0 {
		return c, fieldErr(o.field("Timeout"), "does not apply to a TTL check")
	}
	return c, nil
}

// checkName accepts IDs and names that fit in a URL path segment sensibly:
// non-empty, bounded, printable, no surrounding spaces.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > maxNameLen:
		return fmt.Errorf("longer than %d bytes", maxNameLen)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("%q begins or ends with whitespace", s)
	case strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("%q contains a control character", s)
	case s == "." || s == "..":
		return fmt.Errorf("%q is not a usable name", s)
	}
	return nil
}

func checkMeta(m map[string]string) error {
	if len(m) > maxMetaPairs {
		return fieldErr("Meta", "%d pairs, at most %d allowed", len(m), maxMetaPairs)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case k == "":
			return fieldErr("Meta", "keys must not be empty")
		case len(k) > maxMetaKeyLen:
			return fieldErr("Meta", "key %q is longer than %d characters", k, maxMetaKeyLen)
		case strings.ContainsFunc(k, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		}):
			return fieldErr("Meta", "key %q may contain only letters, digits, '_' and '-'", k)
		case strings.HasPrefix(k, "consul-"):
			return fieldErr("Meta", "key %q: the consul- prefix is reserved", k)
		case len(m[k]) > maxMetaValueLen:
			return fieldErr("Meta", "value of %q is longer than %d characters", k, maxMetaValueLen)
		}
	}
	return nil
}

// decodeCheckUpdate decodes PUT /v1/agent/check/update/:id's body
// {"Status": ..., "Output": ...}.
func decodeCheckUpdate(body []byte) (status, output string, err error) {
	if !json.Valid(body) {
		return "", "", fieldErr("", "request body is not valid JSON")
	}
	o, err := parseObject(body, "", "")
	if err != nil {
		return "", "", err
	}
	if status, err = o.str("Status"); err != nil {
		return "", "", err
	}
	switch status {
	case statusPassing, statusWarning, statusCritical:
	case "":
		return "", "", fieldErr("Status", "is required (passing, warning or critical)")
	default:
		return "", "", fieldErr("Status", "%q is not passing, warning or critical", status)
	}
	if output, err = o.str("Output"); err != nil {
		return "", "", err
	}
	return status, truncateOutput(output), nil
}

// truncateOutput caps check output the way Consul does, saying so.
func truncateOutput(s string) string {
	if len(s) <= maxOutput {
		return s
	}
	cut := maxOutput
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(" ... (captured %d of %d bytes)", cut, len(s))
}
