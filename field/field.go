// Package field is the error type of a configuration setting: a problem
// together with the YAML key path of the setting it is about
// ("open_for", "steps[1].status", "dynamic_weight.cpu").
//
// Every library configuration of switchboard (balance.Config,
// health.ActiveConfig, breaker.Config, retry.Policy, ...) reports what is
// wrong with it as *Error values joined with errors.Join, one per problem.
// A program that builds a configuration in Go reads the joined message;
// the config package, which decoded the value from a file, follows each
// Path through the yaml tags of the struct it validated and reports the
// problem at that key's line and column.
//
// A path is relative to the configuration that was validated. Keys are
// joined with ".", list elements are written [i]. A configuration that
// validates a nested one puts the nested errors under its own key with
// Prefix:
//
//	errs = append(errs, field.Prefix("global", redisCfg.Validate()))
//
// The error text is "PATH: problem", so a problem is written without its
// key: field.Errorf("burst", "must be at least 1, got %d", n) reads
// "burst: must be at least 1, got 0".
package field

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a problem with the setting at Path.
type Error struct {
	// Path is the setting's YAML key path from the root of the
	// configuration that was validated: "burst", "steps[1].status",
	// "global.timeout". Empty when the problem is about the whole
	// configuration.
	Path string
	// Err says what is wrong, without naming the key.
	Err error
}

// Error returns "PATH: problem", or the problem alone when Path is empty.
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error at path whose Err is fmt.Errorf(format,
// args...), so that %w wraps as it does there.
func Errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// Prefix puts err under the key prefix: every *Error that err is or joins
// gets prefix in front of its Path ("timeout" under "global" becomes
// "global.timeout", "[2]" under "steps" becomes "steps[2]"), and any other
// error becomes an *Error at prefix. It returns nil for a nil err and err
// itself for an empty prefix. The *Error values of err are not modified.
func Prefix(prefix string, err error) error {
	if err == nil || prefix == "" {
		return err
	}
	list := Split(err)
	out := make([]error, len(list))
	for i, e := range list {
		out[i] = &Error{Path: join(prefix, e.Path), Err: e.Err}
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// Split returns the problems that err holds: err itself, or the errors it
// joins (through any depth of errors.Join), each as an *Error. An error
// that is not an *Error becomes one with an empty Path. Split(nil) is nil.
func Split(err error) []*Error {
	if err == nil {
		return nil
	}
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *Error:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				if inner != nil {
					walk(inner)
				}
			}
		default:
			out = append(out, &Error{Err: err})
		}
	}
	walk(err)
	return out
}

func join(prefix, path string) string {
	switch {
	case path == "":
		return prefix
	case strings.HasPrefix(path, "["):
		return prefix + path
	}
	return prefix + "." + path
}
