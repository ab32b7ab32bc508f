package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// String formats d as Go does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// parseDuration parses a Go duration string. Negative durations are
// refused: no switchboard setting has a use for one.
func parseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		hint := ""
		if _, ierr := strconv.ParseUint(s, 10, 64); ierr == nil {
			hint = fmt.Sprintf(" (add a unit: %ss)", s)
		}
		return 0, fmt.Errorf("expected a duration like \"250ms\", got %q%s", s, hint)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration must not be negative, got %q", s)
	}
	return Duration(d), nil
}

// Byte-size units.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	KB  Size = 1000
	MB  Size = 1000 * KB
	GB  Size = 1000 * MB
)

// sizeUnits are matched case-insensitively, longest first so that "KiB" is
// not read as "B".
var sizeUnits = []struct {
	name string
	mult Size
}{
	{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB},
	{"KB", KB}, {"MB", MB}, {"GB", GB},
	{"B", 1},
}

// String formats s with the largest binary unit that divides it exactly
// ("64KiB"), or as a plain byte count.
func (s Size) String() string {
	for _, u := range []struct {
		name string
		mult Size
	}{{"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if s != 0 && s%u.mult == 0 {
			return strconv.FormatInt(int64(s/u.mult), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// parseSize parses a byte count: digits, optionally followed by a unit
// (KiB, MiB, GiB as powers of 1024; KB, MB, GB as powers of 1000; B).
func parseSize(s string) (Size, error) {
	bad := fmt.Errorf("expected a size like \"64KiB\", \"1MB\" or 65536, got %q", s)
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("size must not be negative, got %q", s)
	}
	digits := strings.TrimPrefix(t, "+")
	end := 0
	for end < len(digits) && '0' <= digits[end] && digits[end] <= '9' {
		end++
	}
	if end == 0 {
		return 0, bad
	}
	num, unit := digits[:end], strings.TrimSpace(digits[end:])
	mult := Size(1)
	if unit != "" {
		mult = 0
		for _, u := range sizeUnits {
			if strings.EqualFold(unit, u.name) {
				mult = u.mult
				break
			}
		}
		if mult == 0 {
			return 0, bad
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n) * mult, nil
}

// parseInt parses a decimal integer that fits in an int.
func parseInt(s string) (int, error) {
	n, err := strconv.ParseInt(s, 10, strconv.IntSize)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("integer %s is out of range", s)
		}
		return 0, fmt.Errorf("expected an integer, got %q", s)
	}
	return int(n), nil
}

// parseBool accepts the YAML 1.2 core schema's booleans.
func parseBool(s string) (bool, error) {
	switch s {
	case "true", "True", "TRUE":
		return true, nil
	case "false", "False", "FALSE":
		return false, nil
	}
	return false, fmt.Errorf("expected true or false, got %q", s)
}
