package field_test

import (
	"errors"
	"fmt"

	"github.com/switchboard-dev/switchboard/field"
)

// Limit is a configuration that validates itself with field errors, one per
// problem, and its nested Store under the key "store".
type Limit struct {
	Burst int
	Store Store
}

type Store struct{ Timeout int }

func (s Store) Validate() error {
	if s.Timeout < 0 {
		return field.Errorf("timeout", "must not be negative, got %d", s.Timeout)
	}
	return nil
}

func (l Limit) Validate() error {
	var errs []error
	if l.Burst < 1 {
		errs = append(errs, field.Errorf("burst", "must be at least 1, got %d", l.Burst))
	}
	errs = append(errs, field.Prefix("store", l.Store.Validate()))
	return errors.Join(errs...)
}

func Example() {
	err := Limit{Burst: 0, Store: Store{Timeout: -1}}.Validate()
	fmt.Println(err)

	// A program that knows where each key was written reports each
	// problem there.
	for _, e := range field.Split(err) {
		fmt.Printf("at %q: %v\n", e.Path, e.Err)
	}
	// Output:
	// burst: must be at least 1, got 0
	// store.timeout: must not be negative, got -1
	// at "burst": must be at least 1, got 0
	// at "store.timeout": must not be negative, got -1
}
