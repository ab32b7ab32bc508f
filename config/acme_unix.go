//go:build unix

package config

import (
	"errors"

	"golang.org/x/sys/unix"
)

// dirWritable reports whether the process may create files in directory
// p.
func dirWritable(p string) error { return unix.Access(p, unix.W_OK|unix.X_OK) }

// isNotDir reports whether err says a path crosses a file that is not a
// directory.
func isNotDir(err error) bool { return errors.Is(err, unix.ENOTDIR) }
