package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, and that it returns
// either a config or Errors with usable positions, never both.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "testdata/bad/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("admin: {token: '${TOKEN}', listen: \"${NOPE:-127.0.0.1:1}\"}\nlog: {level: $$x}\n"))
	f.Add([]byte("a: &a {b: 1}\nadmin:\n  <<: [*a, *a]\n"))

	// Certificates are never read while fuzzing: a fuzzed path could name
	// anything on this machine.
	h := testHost()
	h.readFile = func(string) ([]byte, error) { return nil, errors.New("not read while fuzzing") }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parse("fuzz.yaml", data, h)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("parse returned config %v and error %v; want exactly one", cfg != nil, err)
		}
		if err == nil {
			return
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error %T %v is not a non-empty Errors", err, err)
		}
		for _, p := range errs {
			if p.Line < 1 || p.Col < 1 || p.Msg == "" || p.File != "fuzz.yaml" {
				t.Fatalf("malformed problem %#v", p)
			}
		}
	})
}
