package fallback

import (
	"context"
	"errors"
	"fmt"
)

// Step is one way to produce a T, tried by First.
type Step[T any] struct {
	Name string // reported when the step serves, and in its error
	Run  func(ctx context.Context) (T, error)
}

// First runs steps in order and returns the first success with the name of
// the step that served it. When every step fails it returns each error,
// prefixed with its step's name, joined. It stops early, with ctx's error
// joined to those so far, when ctx is done.
func First[T any](ctx context.Context, steps ...Step[T]) (T, string, error) {
	var zero T
	var errs []error
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return zero, "", errors.Join(append(errs, err)...)
		}
		v, err := s.Run(ctx)
		if err == nil {
			return v, s.Name, nil
		}
		errs = append(errs, fmt.Errorf("fallback %s: %w", s.Name, err))
	}
	if len(errs) == 0 {
		return zero, "", ErrNoSteps
	}
	return zero, "", errors.Join(errs...)
}

// ErrNoSteps is returned by First and Chain.Serve when there is no step to
// try.
var ErrNoSteps = errors.New("fallback: no steps")
