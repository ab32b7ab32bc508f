// Package examples_test builds and runs every example program under
// examples/, so that they keep compiling and keep working: an example is a
// directory holding a main package, and it must exit 0 and print something
// within RunTimeout. A new example is picked up without touching this file.
package examples_test

import (
	"bytes"
	"context"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// runTimeout bounds one example's run. Examples finish in a few seconds;
// the margin is for a loaded 2-core machine.
const runTimeout = 60 * time.Second

// mainPackages returns the directories under root (relative, slash
// separated) whose Go files declare package main.
func mainPackages(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir // what the go command ignores
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			dir := filepath.ToSlash(filepath.Dir(path))
			if !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("finding the examples: %v", err)
	}
	slices.Sort(dirs)
	return dirs
}

func TestExamplesBuildAndRun(t *testing.T) {
	examples := mainPackages(t, ".")
	if len(examples) == 0 {
		t.Fatal("no example found under examples/: a main package in a directory of its own")
	}
	goCmd, err := exec.LookPath("go") // go test puts its own go first in PATH
	if err != nil {
		t.Fatalf("the go command is needed to build the examples: %v", err)
	}

	// go build -o DIR names each binary after its directory: two examples
	// with the same last element would overwrite each other.
	seen := map[string]string{}
	for _, dir := range examples {
		if other, dup := seen[filepath.Base(dir)]; dup {
			t.Fatalf("examples %s and %s end in the same name; rename one (each is built as examples/<name>)", other, dir)
		}
		seen[filepath.Base(dir)] = dir
	}

	// One go build for all: the go command builds them in parallel and
	// shares what they have in common. -o into a directory names each
	// binary after its directory.
	bin := t.TempDir()
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	for _, dir := range examples {
		args = append(args, "./"+dir)
	}
	build := exec.Command(goCmd, args...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	for _, dir := range examples {
		name := filepath.Base(dir)
		exe := filepath.Join(bin, name)
		if runtime.GOOS == "windows" {
			exe += ".exe"
		}
		t.Run(dir, func(t *testing.T) {
			// Every example listens on 127.0.0.1:0 and writes only to its
			// working directory (a fresh one): they can run side by side.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe)
			cmd.Dir = t.TempDir()
			cmd.WaitDelay = 5 * time.Second // output pipes held by a stray child
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start).Round(time.Millisecond)
			if ctx.Err() != nil {
				t.Fatalf("go run ./examples/%s did not finish within %v\nstdout:\n%s\nstderr:\n%s", name, runTimeout, &stdout, &stderr)
			}
			if err != nil {
				t.Fatalf("go run ./examples/%s: %v after %v\nstdout:\n%s\nstderr:\n%s", name, err, took, &stdout, &stderr)
			}
			if strings.TrimSpace(stdout.String()) == "" {
				t.Fatalf("go run ./examples/%s exited 0 after %v but printed nothing on stdout\nstderr:\n%s", name, took, &stderr)
			}
			t.Logf("ran in %v:\n%s", took, &stdout)
		})
	}
}
