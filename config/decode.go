package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/breaker"
	"github.com/switchboard-dev/switchboard/endpoint"
	"github.com/switchboard-dev/switchboard/fallback"
	"github.com/switchboard-dev/switchboard/health"
	"github.com/switchboard-dev/switchboard/pipeline"
	"github.com/switchboard-dev/switchboard/ratelimit"
	"github.com/switchboard-dev/switchboard/retry"
	"github.com/switchboard-dev/switchboard/upstream"
)

// The decoder walks a yaml.Node tree into Go values by reflection, guided
// by yaml struct tags. Unlike yaml.Node.Decode it reports every problem
// with its position, refuses unknown and duplicate keys, expands
// environment variables in scalars, and records where each value came from
// (see positions).

var (
	durationType = reflect.TypeFor[Duration]()
	// stdDurationType lets library config structs (breaker.Config,
	// fallback.StepConfig) be decoded in place, with the same syntax.
	stdDurationType = reflect.TypeFor[time.Duration]()
	sizeType        = reflect.TypeFor[Size]()
)

// maxValues bounds the number of values decoded from one file, counting
// every use of an alias anew, so that a small file of nested aliases (a
// "billion laughs") cannot make the decoder run for ever.
const maxValues = 1 << 18

type decoder struct {
	src       []byte
	lookup    func(string) (string, bool)
	pos       *positions
	probs     *problems
	values    int   // decoded so far, see maxValues
	overLimit bool  // the maxValues problem is reported
	lines     []int // byte offset of the start of each line, built on first use
}

// decode decodes n into v, which must be addressable, and updates s, the
// site the caller recorded for v.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, s *site) {
	if !d.spend(n, 1) {
		s.bad = true
		return
	}
	n = resolve(n)

	switch v.Type() {
	case durationType, stdDurationType:
		if text, ok := d.scalar(n, s, `a duration like "250ms"`); ok {
			dur, err := parseDuration(text)
			d.set(n, s, err, func() { v.SetInt(int64(dur)) })
		}
		return
	case sizeType:
		if text, ok := d.scalar(n, s, `a size like "64KiB"`); ok {
			size, err := parseSize(text)
			d.set(n, s, err, func() { v.SetInt(int64(size)) })
		}
		return
	}

	switch v.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		v.Set(p)
		d.pos.set(p.Interface(), s)
		d.decode(n, p.Elem(), s)
	case reflect.Struct:
		d.structure(n, v, s)
	case reflect.Slice:
		d.slice(n, v, s)
	case reflect.Map:
		d.mapping(n, v, s)
	case reflect.String:
		if text, ok := d.scalar(n, s, "a string"); ok {
			v.SetString(text)
		}
	case reflect.Bool:
		if text, ok := d.scalar(n, s, "true or false"); ok {
			b, err := parseBool(text)
			d.set(n, s, err, func() { v.SetBool(b) })
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if text, ok := d.scalar(n, s, "an integer"); ok {
			i, err := parseInt(text)
			if err == nil && v.OverflowInt(int64(i)) {
				err = fmt.Errorf("integer %s is out of range", text)
			}
			d.set(n, s, err, func() { v.SetInt(int64(i)) })
		}
	case reflect.Float64:
		if text, ok := d.scalar(n, s, "a number"); ok {
			f, err := strconv.ParseFloat(text, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				err = fmt.Errorf("expected a number, got %q", text)
			}
			d.set(n, s, err, func() { v.SetFloat(f) })
		}
	default:
		// Only a field of a type this decoder does not know gets here, a
		// programming error; reporting it beats panicking on user input.
		d.probs.node(n, "internal error: cannot decode into %s", v.Type())
		s.bad = true
	}
}

// spend counts k more values against maxValues. Past the limit it reports
// the problem, once, and returns false.
func (d *decoder) spend(n *yaml.Node, k int) bool {
	d.values += k
	if d.values <= maxValues {
		return true
	}
	if !d.overLimit {
		d.overLimit = true
		d.probs.node(n, "too many values (over %d, counting every use of an alias)", maxValues)
	}
	return false
}

// set reports err at n, or calls store.
func (d *decoder) set(n *yaml.Node, s *site, err error, store func()) {
	if err != nil {
		d.probs.node(n, "%s", err)
		s.bad = true
		return
	}
	store()
}

// scalar returns the text of the scalar n with environment variables
// expanded. It returns ok false for a null (leaving the zero value), and
// for a non-scalar or a failed expansion, which it reports.
func (d *decoder) scalar(n *yaml.Node, s *site, want string) (text string, ok bool) {
	if isNull(n) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		d.probs.node(n, "expected %s, got %s", want, describe(n))
		s.bad = true
		return "", false
	}
	text, errs := expand(n.Value, d.lookup)
	for _, e := range errs {
		line, col := d.refPos(n, e.ref)
		d.probs.at(line, col, "%s", e.msg)
		s.bad = true
	}
	return text, len(errs) == 0
}

// structure decodes a mapping into a struct, field by yaml tag.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, s *site) {
	fields := fieldsOf(v.Type())
	if isNull(n) {
		d.absent(v, n)
		return
	}
	if n.Kind != yaml.MappingNode {
		d.probs.node(n, "expected a mapping, got %s", describe(n))
		s.bad = true
		d.absent(v, n)
		return
	}
	seen := map[string]*yaml.Node{}
	for _, p := range d.pairs(n) {
		name, ok := d.key(p, seen)
		if !ok {
			continue
		}
		f, found := fieldNamed(fields, name)
		if !found {
			d.probs.node(p.key, "unknown key %q %s (known: %s)", name, contextOf(v.Type()), fieldNames(fields))
			continue
		}
		fv := v.FieldByIndex(f.index)
		fs := &site{key: p.key, value: p.value, parent: n}
		d.pos.set(fv.Addr().Interface(), fs)
		d.decode(p.value, fv, fs)
	}
	for _, f := range fields {
		if seen[f.name] == nil {
			d.absentField(v.FieldByIndex(f.index), n)
		}
	}
	d.inline(v, s)
}

// absent records every field of the struct v, recursively through nested
// structs, as absent under parent, so that a problem about a missing
// field is reported at the mapping that lacks it.
func (d *decoder) absent(v reflect.Value, parent *yaml.Node) {
	for _, f := range fieldsOf(v.Type()) {
		d.absentField(v.FieldByIndex(f.index), parent)
	}
	d.inline(v, &site{parent: parent})
}

func (d *decoder) absentField(fv reflect.Value, parent *yaml.Node) {
	d.pos.set(fv.Addr().Interface(), &site{parent: parent})
	if fv.Kind() == reflect.Struct {
		d.absent(fv, parent)
	}
}

func (d *decoder) slice(n *yaml.Node, v reflect.Value, s *site) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.probs.node(n, "expected a list, got %s", describe(n))
		s.bad = true
		return
	}
	sl := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	v.Set(sl)
	for i, e := range n.Content {
		ev := sl.Index(i)
		es := &site{value: e, parent: n}
		d.pos.set(ev.Addr().Interface(), es)
		d.decode(e, ev, es)
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, s *site) {
	if isNull(n) {
		return
	}
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		d.probs.node(n, "internal error: cannot decode into %s", t)
		s.bad = true
		return
	}
	if n.Kind != yaml.MappingNode {
		d.probs.node(n, "expected a mapping, got %s", describe(n))
		s.bad = true
		return
	}
	m := reflect.MakeMapWithSize(t, len(n.Content)/2)
	v.Set(m)
	seen := map[string]*yaml.Node{}
	for _, p := range d.pairs(n) {
		name, ok := d.key(p, seen)
		if !ok {
			continue
		}
		es := &site{key: p.key, value: p.value, parent: n}
		d.pos.set(entryKey{m: m.Pointer(), key: name}, es)
		ev := reflect.New(t.Elem()).Elem()
		if ev.Kind() == reflect.Pointer && ev.Type().Elem().Kind() == reflect.Struct && isNull(resolve(p.value)) {
			// "orders:" with nothing under it is an empty upstream, not
			// a missing one, so that the checks can say what it lacks.
			ev.Set(reflect.New(ev.Type().Elem()))
			es.value = nil
			d.pos.set(ev.Interface(), es)
			d.absent(ev.Elem(), p.key)
		} else {
			d.decode(p.value, ev, es)
		}
		m.SetMapIndex(reflect.ValueOf(name).Convert(t.Key()), ev)
	}
}

// pair is one key and value of a mapping. merged pairs come from a merge
// key ("<<: *defaults") and give way to the mapping's own keys.
type pair struct {
	key, value *yaml.Node
	merged     bool
}

// pairs returns n's own pairs followed by the pairs it merges in, leaving
// out merged pairs whose key is already there (they would lose anyway, and
// dropping them early keeps nested merges cheap).
func (d *decoder) pairs(n *yaml.Node) []pair {
	if !d.spend(n, len(n.Content)/2) {
		return nil
	}
	var own, merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.merge(v)...)
			continue
		}
		own = append(own, pair{key: k, value: v})
	}
	if len(merged) == 0 {
		return own
	}
	have := map[string]bool{}
	for _, p := range own {
		if k := resolve(p.key); k.Kind == yaml.ScalarNode {
			have[k.Value] = true
		}
	}
	out := own
	for _, p := range merged {
		if k := resolve(p.key); k.Kind == yaml.ScalarNode {
			if have[k.Value] {
				continue
			}
			have[k.Value] = true
		}
		out = append(out, p)
	}
	return out
}

// merge returns the pairs a merge key brings in: those of one mapping, or
// of a list of mappings where earlier ones win.
func (d *decoder) merge(v *yaml.Node) []pair {
	v = resolve(v)
	var from []*yaml.Node
	switch v.Kind {
	case yaml.MappingNode:
		from = []*yaml.Node{v}
	case yaml.SequenceNode:
		for _, e := range v.Content {
			from = append(from, resolve(e))
		}
	default:
		d.probs.node(v, "a merge key (<<) takes a mapping or a list of mappings, got %s", describe(v))
		return nil
	}
	var out []pair
	for _, m := range from {
		if m.Kind != yaml.MappingNode {
			d.probs.node(m, "a merge key (<<) takes a mapping or a list of mappings, got %s in the list", describe(m))
			continue
		}
		for _, p := range d.pairs(m) {
			p.merged = true
			out = append(out, p)
		}
	}
	return out
}

// key returns the name p's key gives, after checking that it is a scalar
// and, for a key of the mapping itself, that it is not a duplicate. A
// merged key that is already set is skipped quietly: that is what merging
// is for.
func (d *decoder) key(p pair, seen map[string]*yaml.Node) (string, bool) {
	k := resolve(p.key)
	if k.Kind != yaml.ScalarNode {
		d.probs.node(k, "expected a key name, got %s", describe(k))
		return "", false
	}
	name := k.Value
	if first := seen[name]; first != nil {
		if !p.merged {
			d.probs.node(p.key, "duplicate key %q (first at line %d)", name, first.Line)
		}
		return "", false
	}
	seen[name] = p.key
	return name, true
}

// refPos returns the position of the ref-th ${ reference in the scalar n,
// found by scanning the source from n's start; n's own position if the
// source does not show it (an escaped "\x24{" in a quoted string, say).
func (d *decoder) refPos(n *yaml.Node, ref int) (line, col int) {
	start := d.offset(n.Line, n.Column)
	if start < 0 {
		return n.Line, n.Column
	}
	rel := refOffset(d.src[start:], ref)
	if rel < 0 {
		return n.Line, n.Column
	}
	off := start + rel
	i := sort.Search(len(d.lines), func(i int) bool { return d.lines[i] > off })
	return i, utf8.RuneCount(d.src[d.lines[i-1]:off]) + 1
}

// offset converts a 1-based line and column (in characters, as yaml counts
// them) to a byte offset in the source, or -1.
func (d *decoder) offset(line, col int) int {
	if d.lines == nil {
		d.lines = []int{0}
		for i, c := range d.src {
			if c == '\n' {
				d.lines = append(d.lines, i+1)
			}
		}
	}
	if line < 1 || line > len(d.lines) {
		return -1
	}
	off := d.lines[line-1]
	for c := 1; c < col && off < len(d.src); c++ {
		_, size := utf8.DecodeRune(d.src[off:])
		off += size
	}
	return off
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	// The parser refuses an anchor that contains itself, so chains end;
	// the bound is only a guard.
	for i := 0; i < 64 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe says what a node is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "an alias"
}

// keyField is a struct field that a YAML key can set. index is its index
// sequence for reflect.Value.FieldByIndex: a field of an inline struct is
// a field of its parent.
type keyField struct {
	name  string
	index []int
}

// fieldsOf lists t's YAML keys in declaration order. A field tagged
// `yaml:"-"` and unexported fields (position bookkeeping, say) are not
// keys; a field without a tag is keyed by its lower-cased name, as yaml
// does. The keys of a struct field tagged `yaml:",inline"` are keys of t,
// in its place: pipeline.RateLimit has ratelimit.Config's keys beside its
// own name and global.
func fieldsOf(t reflect.Type) []keyField {
	var fs []keyField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if isInline(f) {
			for _, in := range fieldsOf(f.Type) {
				fs = append(fs, keyField{name: in.name, index: append([]int{i}, in.index...)})
			}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		fs = append(fs, keyField{name: name, index: []int{i}})
	}
	return fs
}

// isInline reports whether f is a struct whose keys are written in its
// parent's mapping (`yaml:",inline"`). Only structs can be inline here;
// yaml's inline maps are not supported.
func isInline(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return f.Type.Kind() == reflect.Struct && slices.Contains(strings.Split(opts, ","), "inline")
}

// inline records the inline structs of v, a struct decoded from s, at s:
// their keys are written in v's own mapping.
func (d *decoder) inline(v reflect.Value, s *site) {
	for i := 0; i < v.NumField(); i++ {
		if f := v.Type().Field(i); f.IsExported() && isInline(f) {
			d.pos.set(v.Field(i).Addr().Interface(), s)
			d.inline(v.Field(i), s)
		}
	}
}

func fieldNamed(fs []keyField, name string) (keyField, bool) {
	for _, f := range fs {
		if f.name == name {
			return f, true
		}
	}
	return keyField{}, false
}

func fieldNames(fs []keyField) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// contexts name the place a struct's keys live in, for unknown-key
// messages; the default is "in " and the lower-cased type name. The
// library configs are named by the key they are written under, since
// their type names (breaker.Config, retry.Policy) do not say it.
var contexts = map[reflect.Type]string{
	reflect.TypeFor[Config]():           "at the top level",
	reflect.TypeFor[ListenerTimeouts](): "in listener timeouts",
	reflect.TypeFor[UpstreamTimeouts](): "in upstream timeouts",

	reflect.TypeFor[endpoint.Spec]():               "in target",
	reflect.TypeFor[balance.Config]():              "in balance",
	reflect.TypeFor[balance.DynamicWeightConfig](): "in balance.dynamic_weight",
	reflect.TypeFor[balance.DynamicFactor]():       "in a balance.dynamic_weight.factors entry",
	reflect.TypeFor[health.ActiveConfig]():         "in health.active",
	reflect.TypeFor[health.PassiveConfig]():        "in health.passive",
	reflect.TypeFor[ratelimit.ConcurrencyConfig](): "in concurrency",
	reflect.TypeFor[pipeline.RateLimit]():          "in a rate_limit entry",
	reflect.TypeFor[pipeline.GlobalLimit]():        "in rate_limit global",
	reflect.TypeFor[upstream.Health]():             "in health",
	reflect.TypeFor[upstream.MetricsConfig]():      "in upstream metrics",
	reflect.TypeFor[breaker.Config]():              "in breaker",
	reflect.TypeFor[retry.Policy]():                "in retry",
	reflect.TypeFor[fallback.Config]():             "in fallback",
	reflect.TypeFor[fallback.StepConfig]():         "in a fallback step",
	reflect.TypeFor[fallback.CacheConfig]():        "in fallback cache",
}

func contextOf(t reflect.Type) string {
	if c, ok := contexts[t]; ok {
		return c
	}
	return "in " + strings.ToLower(t.Name())
}
