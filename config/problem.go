package config

import (
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Problem is one mistake in a configuration file. Line and Col are 1-based
// and point at the YAML node the problem is about, or at the nearest node
// that encloses it when the problem is something missing.
type Problem struct {
	File      string
	Line, Col int
	Msg       string
}

// String formats p the way compilers do, so editors can jump to it:
// "FILE:LINE:COL: message".
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Col, p.Msg)
}

// Errors is every problem found in one configuration, sorted by line and
// then column. Parse and Load return it as their error; get at the
// individual problems with errors.As.
type Errors []Problem

// Error returns the problems one per line.
func (e Errors) Error() string {
	var b strings.Builder
	for i, p := range e {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// problems collects Problems for one file. The same problem reported twice
// (which happens when an anchored node is used through several aliases) is
// kept once.
type problems struct {
	file string
	list []Problem
	seen map[Problem]bool
}

func (ps *problems) at(line, col int, format string, args ...any) {
	if line < 1 {
		line = 1
	}
	if col < 1 {
		col = 1
	}
	p := Problem{File: ps.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
	if ps.seen[p] {
		return
	}
	if ps.seen == nil {
		ps.seen = map[Problem]bool{}
	}
	ps.seen[p] = true
	ps.list = append(ps.list, p)
}

// node reports a problem at n, or at the start of the file when n is nil.
func (ps *problems) node(n *yaml.Node, format string, args ...any) {
	line, col := 1, 1
	if n != nil {
		line, col = n.Line, n.Column
	}
	ps.at(line, col, format, args...)
}

func (ps *problems) empty() bool { return len(ps.list) == 0 }

// errors returns the problems sorted by position. Problems at the same
// position keep the order they were found in.
func (ps *problems) errors() Errors {
	errs := make(Errors, len(ps.list))
	copy(errs, ps.list)
	sort.SliceStable(errs, func(i, j int) bool {
		if errs[i].Line != errs[j].Line {
			return errs[i].Line < errs[j].Line
		}
		return errs[i].Col < errs[j].Col
	})
	return errs
}
