package fallback

import (
	"errors"
	"fmt"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// The step types of StepConfig.Type.
const (
	StepBackup = "backup"
	StepStale  = "stale"
	StepStatic = "static"
)

// Config is a route's fallback: block. The yaml tags are its keys.
type Config struct {
	// On lists what triggers the chain: breaker_open, no_healthy_endpoint,
	// retries_exhausted, status:CODE. Default the first three.
	On []string `yaml:"on"`
	// Steps are tried in order; the first that serves answers the request.
	Steps []StepConfig `yaml:"steps"`
	// Cache bounds the responses kept for stale steps.
	Cache CacheConfig `yaml:"cache"`
}

// StepConfig is one fallback step. A key the step's type does not read must
// be left unset: setting it is an error, so a misplaced key is caught at
// load time.
type StepConfig struct {
	// Type is backup, stale or static. Required.
	Type string `yaml:"type"`
	// Upstream names the backup upstream (pool). Required by backup.
	Upstream string `yaml:"upstream"`
	// MaxAge is how old a stored response stale may serve. Required by
	// stale.
	MaxAge time.Duration `yaml:"max_age"`
	// Status is the static response's status code. Required by static.
	Status int `yaml:"status"`
	// Headers are the static response's headers.
	Headers map[string]string `yaml:"headers"`
	// Body is the static response's body. At most one of body and
	// body_file.
	Body string `yaml:"body"`
	// BodyFile is a file whose content is the static response's body, read
	// once when the chain is built.
	BodyFile string `yaml:"body_file"`
}

// Validate reports every problem in c, or nil: a *field.Error per
// problem, joined, each naming its yaml key path ("steps[1].status"). It
// cannot know the names of upstreams: CheckUpstreams does that, for the
// proxy that knows them.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, field.Errorf(key, format, args...))
	}
	for i, s := range c.On {
		if _, err := ParseTriggers([]string{s}); err != nil {
			bad(fmt.Sprintf("on[%d]", i), "%w", err)
		}
	}
	if len(c.Steps) == 0 {
		bad("steps", "a fallback needs at least one step (backup, stale or static)")
	}
	for i, s := range c.Steps {
		key := func(k string) string { return fmt.Sprintf("steps[%d].%s", i, k) }
		unused := func(k string, set bool) {
			if set {
				bad(key(k), "not a key of a %s step", s.Type)
			}
		}
		switch s.Type {
		case StepBackup:
			if s.Upstream == "" {
				bad(key("upstream"), "a backup step needs the name of its upstream")
			}
			unused("max_age", s.MaxAge != 0)
			unused("status", s.Status != 0)
			unused("headers", s.Headers != nil)
			unused("body", s.Body != "")
			unused("body_file", s.BodyFile != "")
		case StepStale:
			if s.MaxAge <= 0 {
				bad(key("max_age"), "a stale step needs a positive duration, got %s", s.MaxAge)
			}
			unused("upstream", s.Upstream != "")
			unused("status", s.Status != 0)
			unused("headers", s.Headers != nil)
			unused("body", s.Body != "")
			unused("body_file", s.BodyFile != "")
		case StepStatic:
			if s.Status < 100 || s.Status > 599 {
				bad(key("status"), "a static step needs an HTTP status (100-599), got %d", s.Status)
			}
			if s.Body != "" && s.BodyFile != "" {
				bad(key("body_file"), "set body or body_file, not both")
			}
			for name := range s.Headers {
				if name == "" {
					bad(key("headers"), "header name %q is empty", name)
				}
			}
			unused("upstream", s.Upstream != "")
			unused("max_age", s.MaxAge != 0)
		case "":
			bad(key("type"), "a step needs a type: backup, stale or static")
		default:
			bad(key("type"), "step type %q is unknown (known: backup, stale, static)", s.Type)
		}
	}
	cc := c.Cache
	if cc.MaxEntries < 0 {
		bad("cache.max_entries", "must not be negative, got %d", cc.MaxEntries)
	}
	if cc.MaxBytes < 0 {
		bad("cache.max_bytes", "must not be negative, got %d", cc.MaxBytes)
	}
	if cc.MaxResponseBytes < 0 {
		bad("cache.max_response_bytes", "must not be negative, got %d", cc.MaxResponseBytes)
	}
	if d := cc.withDefaults(); cc.MaxBytes >= 0 && cc.MaxResponseBytes >= 0 && d.MaxResponseBytes > d.MaxBytes {
		bad("cache.max_response_bytes", "%d is above cache.max_bytes %d: no response that size could be kept", d.MaxResponseBytes, d.MaxBytes)
	}
	return errors.Join(errs...)
}

// CheckUpstreams reports every backup step naming an upstream for which
// exists returns false, as a *field.Error at its steps[i].upstream.
func (c Config) CheckUpstreams(exists func(name string) bool) error {
	var errs []error
	for i, s := range c.Steps {
		if s.Type == StepBackup && s.Upstream != "" && !exists(s.Upstream) {
			errs = append(errs, field.Errorf(fmt.Sprintf("steps[%d].upstream", i), "backup upstream %q is not defined", s.Upstream))
		}
	}
	return errors.Join(errs...)
}
