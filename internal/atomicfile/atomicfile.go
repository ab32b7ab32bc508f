// Package atomicfile replaces a file so that a reader, or a crash, sees
// the old content or the new, never a mix.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data: it writes a temporary file in the same
// directory (named by tmpPattern, as os.CreateTemp takes it), fsyncs it,
// renames it over path and fsyncs the directory so that the rename itself
// survives a power loss (rename(2) is atomic within one file system; the
// directory fsync is what makes it durable, see fsync(2)). On error the
// temporary file is removed and path is untouched.
func Write(path, tmpPattern string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tmpPattern)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
