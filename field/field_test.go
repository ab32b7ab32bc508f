package field

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

func TestErrorNamesThePath(t *testing.T) {
	if got := Errorf("steps[1].status", "must be 100-599, got %d", 7).Error(); got != "steps[1].status: must be 100-599, got 7" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&Error{Err: errors.New("no steps")}).Error(); got != "no steps" {
		t.Errorf("Error() without a path = %q, want the problem alone", got)
	}
}

func TestErrorfWrapsWithW(t *testing.T) {
	e := Errorf("body_file", "cannot read: %w", fs.ErrNotExist)
	if !errors.Is(e, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v, fs.ErrNotExist) = false, want the %%w error reachable", e)
	}
}

func TestPrefixRewritesEveryJoinedPath(t *testing.T) {
	inner := errors.Join(
		Errorf("timeout", "must not be negative"),
		errors.Join(Errorf("[2]", "bad entry"), Errorf("", "whole block")),
		errors.New("plain"),
	)
	err := Prefix("global", inner)
	var paths []string
	for _, e := range Split(err) {
		paths = append(paths, e.Path)
	}
	if got, want := strings.Join(paths, ","), "global.timeout,global[2],global,global"; got != want {
		t.Errorf("paths after Prefix = %s, want %s", got, want)
	}
	if got := Split(inner)[0].Path; got != "timeout" {
		t.Errorf("Prefix modified the original error: its path is now %q", got)
	}
}

func TestPrefixOfOneErrorIsOneError(t *testing.T) {
	err := Prefix("dynamic_weight", Errorf("cpu", "must be >= 0, got -1"))
	var fe *Error
	if !errors.As(err, &fe) || fe.Path != "dynamic_weight.cpu" {
		t.Fatalf("Prefix = %#v, want one *Error at dynamic_weight.cpu", err)
	}
	if Prefix("x", nil) != nil {
		t.Error("Prefix of nil is not nil")
	}
	if e := Errorf("a", "b"); Prefix("", e) != error(e) {
		t.Error("Prefix with an empty prefix changed the error")
	}
}

func TestSplit(t *testing.T) {
	if Split(nil) != nil {
		t.Error("Split(nil) is not nil")
	}
	plain := errors.New("plain")
	got := Split(plain)
	if len(got) != 1 || got[0].Path != "" || got[0].Err != plain {
		t.Errorf("Split(plain) = %v, want one *Error with an empty path", got)
	}
}
