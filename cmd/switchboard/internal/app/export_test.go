package app

import (
	"errors"

	"github.com/fsnotify/fsnotify"
)

// NoWatcher makes a's config file impossible to watch, as when the user is
// out of inotify instances.
func NoWatcher(a *App) {
	a.newWatcher = func() (*fsnotify.Watcher, error) { return nil, errors.New("too many open files") }
}
