package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Load reads, validates and defaults the configuration file at path. A
// file that cannot be read gives a wrapped *fs.PathError; a file with
// problems gives an Errors value and a nil *Config.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse validates and defaults the configuration in data, taking
// environment variables from the process environment. file names the
// configuration in problems and becomes Config.File. On any problem Parse
// returns a nil *Config and an Errors value listing every problem found.
func Parse(file string, data []byte) (*Config, error) {
	return parse(file, data, osSys)
}

// sys is what loading needs from the outside world; tests replace it.
type sys struct {
	lookupEnv func(name string) (string, bool)
	readFile  func(path string) ([]byte, error)
}

var osSys = sys{lookupEnv: os.LookupEnv, readFile: readSmallFile}

func parse(file string, data []byte, h sys) (*Config, error) {
	probs := &problems{file: file}
	root := parseYAML(data, probs)
	if root == nil {
		return nil, probs.errors()
	}
	pos := newPositions(root)
	cfg := &Config{}
	rootSite := &site{value: root}
	pos.set(cfg, rootSite)
	d := &decoder{src: data, lookup: h.lookupEnv, pos: pos, probs: probs}
	d.decode(root, reflect.ValueOf(cfg).Elem(), rootSite)

	v := &validator{cfg: cfg, pos: pos, probs: probs, readFile: h.readFile}
	for _, check := range checks {
		check(v)
	}
	if !probs.empty() {
		return nil, probs.errors()
	}
	applyDefaults(cfg)
	cfg.File = file
	return cfg, nil
}

// parseYAML parses data into a node tree and returns its top-level
// mapping, or nil after reporting why there is none.
func parseYAML(data []byte, probs *problems) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			probs.at(1, 1, "empty configuration")
		} else {
			syntaxProblem(err, data, probs)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		syntaxProblem(err, data, probs)
	case len(extra.Content) > 0 && !isNull(extra.Content[0]):
		probs.node(&extra, "a second YAML document; a configuration file holds one")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || isNull(doc.Content[0]) {
		probs.at(1, 1, "empty configuration")
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		probs.node(root, "the top level must be a mapping (keys: %s), got %s",
			fieldNames(fieldsOf(reflect.TypeFor[Config]())), describe(root))
		return nil
	}
	return root
}

var (
	yamlLine   = regexp.MustCompile(`^line (\d+): `)
	yamlAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)
)

// yamlParserErrors are the yaml parser's (as opposed to its scanner's)
// messages. For these the line it gives is 0-based and is where the
// enclosing collection starts, and no line means the first.
var yamlParserErrors = []string{
	"did not find expected",
	"found undefined tag handle",
	"found duplicate %",
	"found incompatible YAML document",
}

// syntaxProblem reports a YAML parse error. The parser gives a line, not
// always the problem's own, and no column, so the column is that of the
// line's first character; an unknown anchor is found in the source.
func syntaxProblem(err error, data []byte, probs *problems) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	for _, p := range yamlParserErrors {
		if strings.HasPrefix(msg, p) {
			line++
			break
		}
	}
	line = max(line, 1)
	lines := bytes.Split(data, []byte("\n"))
	col := 1
	if line <= len(lines) {
		text := lines[line-1]
		col = utf8.RuneCount(text) - utf8.RuneCount(bytes.TrimLeft(text, " \t")) + 1
	}
	if m := yamlAnchor.FindStringSubmatch(msg); m != nil {
		if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
			start := bytes.LastIndexByte(data[:i], '\n') + 1
			line = bytes.Count(data[:i], []byte("\n")) + 1
			col = utf8.RuneCount(data[start:i]) + 1
		}
	}
	probs.at(line, col, "invalid YAML: %s", msg)
}

// maxPEMFile caps a certificate or key file; real ones are a few KiB.
const maxPEMFile = 1 << 20

// readSmallFile reads a regular file of at most maxPEMFile bytes. Its
// errors leave out the path, which the caller names.
func readSmallFile(path string) ([]byte, error) {
	// Stat before opening: opening a FIFO would block.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if len(data) > maxPEMFile {
		return nil, fmt.Errorf("larger than %d bytes", maxPEMFile)
	}
	return data, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
