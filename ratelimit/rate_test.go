package ratelimit

import (
	"testing"
	"time"
)

func TestParseRateAcceptsUnitsAndCounts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
		str  string
	}{
		{"100/s", Rate{100, time.Second}, "100/s"},
		{"5/m", Rate{5, time.Minute}, "5/m"},
		{"1000/h", Rate{1000, time.Hour}, "1000/h"},
		{"10/100ms", Rate{10, 100 * time.Millisecond}, "10/100ms"},
		{"1/1s", Rate{1, time.Second}, "1/s"},
		{"3/60s", Rate{3, time.Minute}, "3/m"},
		{"7/250us", Rate{7, 250 * time.Microsecond}, "7/250us"},
		{"1/1500ns", Rate{1, 1500 * time.Nanosecond}, "1/1500ns"},
	} {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if s := got.String(); s != tc.str {
			t.Errorf("Rate%v.String() = %q, want %q", got, s, tc.str)
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(String()) = %v, %v; want %v", back, err, got)
		}
	}
}

func TestParseRateErrorsSayWhatIsWrong(t *testing.T) {
	for in, msg := range map[string]string{
		"0/s":                    `rate: must be N/UNIT like 100/s, got "0/s": N must be at least 1`,
		"-5/s":                   `rate: must be N/UNIT like 100/s, got "-5/s": N must be at least 1`,
		"100":                    `rate: must be N/UNIT like 100/s, got "100": no "/" between N and UNIT`,
		"1.5/s":                  `rate: must be N/UNIT like 100/s, got "1.5/s": N must be a whole number`,
		"x/s":                    `rate: must be N/UNIT like 100/s, got "x/s": N must be a whole number`,
		"5/fortnight":            `rate: must be N/UNIT like 100/s, got "5/fortnight": UNIT must be ns, us, ms, s, m or h, optionally after a count as in 100ms`,
		"5/":                     `rate: must be N/UNIT like 100/s, got "5/": UNIT must be ns, us, ms, s, m or h, optionally after a count as in 100ms`,
		"5/0s":                   `rate: must be N/UNIT like 100/s, got "5/0s": the count before the unit must be a whole number of at least 1`,
		"2/ns":                   `rate: must be N/UNIT like 100/s, got "2/ns": more than one event per nanosecond`,
		"1/9999999h":             `rate: must be N/UNIT like 100/s, got "1/9999999h": the period is too long`,
		"99999999999999999999/s": `rate: must be N/UNIT like 100/s, got "99999999999999999999/s": N is too large`,
	} {
		_, err := ParseRate(in)
		if err == nil || err.Error() != msg {
			t.Errorf("ParseRate(%q) error:\n got %v\nwant %s", in, err, msg)
		}
	}
}

func TestRateIntervalRoundsToNearestNanosecond(t *testing.T) {
	for r, want := range map[Rate]time.Duration{
		{100, time.Second}:     10 * time.Millisecond,
		{3, time.Second}:       333333333,
		{2, 3}:                 2, // 1.5ns rounds up
		{1, time.Hour}:         time.Hour,
		{10, time.Millisecond}: 100 * time.Microsecond,
	} {
		if got := r.Interval(); got != want {
			t.Errorf("%v.Interval() = %v, want %v", r, got, want)
		}
	}
}

func TestRateUnmarshalText(t *testing.T) {
	var r Rate
	if err := r.UnmarshalText([]byte("10/100ms")); err != nil || r != (Rate{10, 100 * time.Millisecond}) {
		t.Fatalf("UnmarshalText = %v, %v", r, err)
	}
	if err := r.UnmarshalText([]byte("0/s")); err == nil {
		t.Fatal("UnmarshalText(0/s) succeeded")
	}
}
