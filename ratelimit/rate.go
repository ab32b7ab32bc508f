package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

// Rate is N events per period: "100/s" is Rate{N: 100, Per: time.Second}.
// A token or leaky bucket spaces events Per/N apart; a window limiter
// admits N per window of length Per.
type Rate struct {
	N   int           // events per period, at least 1
	Per time.Duration // the period, positive
}

// rateUnits are the units ParseRate accepts, largest first (String picks
// the largest that divides the period).
var rateUnits = []struct {
	name string
	d    time.Duration
}{
	{"h", time.Hour},
	{"m", time.Minute},
	{"s", time.Second},
	{"ms", time.Millisecond},
	{"us", time.Microsecond},
	{"ns", time.Nanosecond},
}

// ParseRate parses N/UNIT or N/COUNTUNIT: "100/s", "5/m", "1000/h",
// "10/100ms". UNIT is one of ns, us, ms, s, m, h; N and COUNT are whole
// numbers of at least 1. A rate may not exceed one event per nanosecond.
func ParseRate(s string) (Rate, error) {
	bad := func(why string) (Rate, error) {
		return Rate{}, field.Errorf("rate", "must be N/UNIT like 100/s, got %q: %s", s, why)
	}
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return bad(`no "/" between N and UNIT`)
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return bad("N is too large")
		}
		return bad("N must be a whole number")
	}
	if n < 1 {
		return bad("N must be at least 1")
	}
	// Split "100ms" into the count "100" and the unit "ms".
	i := 0
	for i < len(per) && '0' <= per[i] && per[i] <= '9' {
		i++
	}
	countText, unitText := per[:i], per[i:]
	unit := time.Duration(0)
	for _, u := range rateUnits {
		if u.name == unitText {
			unit = u.d
		}
	}
	if unit == 0 {
		return bad("UNIT must be ns, us, ms, s, m or h, optionally after a count as in 100ms")
	}
	count := 1
	if countText != "" {
		count, err = strconv.Atoi(countText)
		if err != nil || count < 1 {
			return bad("the count before the unit must be a whole number of at least 1")
		}
	}
	if count > int(maxDuration/unit) {
		return bad("the period is too long")
	}
	r := Rate{N: n, Per: time.Duration(count) * unit}
	if int64(r.Per) < int64(r.N) {
		return bad("more than one event per nanosecond")
	}
	return r, nil
}

const maxDuration = time.Duration(1<<63 - 1)

// String returns the rate in the form ParseRate reads, with the largest
// unit that divides the period: "100/s", "10/100ms".
func (r Rate) String() string {
	for _, u := range rateUnits {
		if r.Per%u.d == 0 && r.Per > 0 {
			count := r.Per / u.d
			if count == 1 {
				return strconv.Itoa(r.N) + "/" + u.name
			}
			return strconv.Itoa(r.N) + "/" + strconv.FormatInt(int64(count), 10) + u.name
		}
	}
	return strconv.Itoa(r.N) + "/" + strconv.FormatInt(int64(r.Per), 10) + "ns"
}

// Interval is the time between two events at this rate, Per/N rounded to
// the nearest nanosecond: the emission interval of the token and leaky
// buckets. Rounding makes, for example, 3/s admit one event every
// 333333333ns, which is 1e-9 faster than exact.
func (r Rate) Interval() time.Duration {
	return (r.Per + time.Duration(r.N)/2) / time.Duration(r.N)
}

// UnmarshalText parses a rate with ParseRate, so that a Rate can be a field
// of a YAML, JSON or flag-decoded struct.
func (r *Rate) UnmarshalText(text []byte) error {
	v, err := ParseRate(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalText returns String.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// valid reports whether r could have come from ParseRate.
func (r Rate) valid() error {
	if r.N < 1 || r.Per <= 0 || int64(r.Per) < int64(r.N) {
		return fmt.Errorf("ratelimit: invalid rate %d per %v: want N >= 1, Per > 0 and at most one event per nanosecond", r.N, r.Per)
	}
	return nil
}
