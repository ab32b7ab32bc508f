//go:build !unix

package config

// dirWritable cannot ask the system without writing where access(2) is
// missing: the directory's permissions are left to the ACME manager's
// first write, which reports them.
func dirWritable(string) error { return nil }

// isNotDir: a path crossing a file reports fs.ErrNotExist here.
func isNotDir(error) bool { return false }
