package config

import (
	"fmt"
	"strings"
)

// expandError is a problem with one ${...} reference in a scalar. ref is
// the reference's ordinal among the scalar's references, which lets the
// caller find it in the source text.
type expandError struct {
	ref int
	msg string
}

// expand replaces ${NAME} and ${NAME:-default} in s with values from
// lookup and turns $$ into $. ${NAME:-default} uses default when NAME is
// unset or empty, as the shell does. A $ followed by anything else is kept
// as it is. The result is not expanded again.
func expand(s string, lookup func(string) (string, bool)) (string, []expandError) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var (
		b    strings.Builder
		errs []expandError
		ref  int
	)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c != '$' || i+1 == len(s):
			b.WriteByte(c)
			i++
		case s[i+1] == '$':
			b.WriteByte('$')
			i += 2
		case s[i+1] == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				errs = append(errs, expandError{ref, `"${" without a closing "}"`})
				b.WriteString(s[i:])
				i = len(s)
				break
			}
			body := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(body, ":-")
			val, ok := lookup(name)
			switch {
			case !validEnvName(name):
				errs = append(errs, expandError{ref, fmt.Sprintf("invalid environment variable name %q in \"${%s}\"", name, body)})
			case hasDef && (!ok || val == ""):
				val = def
			case !ok:
				errs = append(errs, expandError{ref, fmt.Sprintf("environment variable %s is not set (write ${%s:-default} to give a default)", name, name)})
			}
			b.WriteString(val)
			ref++
			i += 2 + end + 1
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String(), errs
}

// refOffset returns the byte offset in src of the n-th ${ reference, scanning
// the way expand does, or -1.
func refOffset(src []byte, n int) int {
	for i := 0; i+1 < len(src); i++ {
		if src[i] != '$' {
			continue
		}
		switch src[i+1] {
		case '$':
			i++
		case '{':
			if n == 0 {
				return i
			}
			n--
			i++
		}
	}
	return -1
}

// validEnvName reports whether name is a portable environment variable
// name: a letter or underscore, then letters, digits and underscores.
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
