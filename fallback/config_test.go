package fallback

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/field"
)

func TestParseTriggers(t *testing.T) {
	ts, err := ParseTriggers([]string{"breaker_open", "status:503", "status:429"})
	if err != nil {
		t.Fatal(err)
	}
	if !ts.On(BreakerOpen) || ts.On(NoHealthyEndpoint) || ts.On(RetriesExhausted) {
		t.Fatalf("events wrong: %+v", ts)
	}
	for code, want := range map[int]bool{503: true, 429: true, 502: false, 599: false, 99: false, 600: false} {
		if ts.OnStatus(code) != want {
			t.Errorf("OnStatus(%d) = %v, want %v", code, !want, want)
		}
	}
	def, _ := ParseTriggers(nil)
	if !def.On(BreakerOpen) || !def.On(NoHealthyEndpoint) || !def.On(RetriesExhausted) || def.OnStatus(503) {
		t.Fatal("empty on: list must mean the three events and no status")
	}
	for _, bad := range []string{"status:5xx", "status:42", "breaker", ""} {
		if _, err := ParseTriggers([]string{bad}); err == nil {
			t.Errorf("ParseTriggers(%q) accepted it", bad)
		}
	}
}

func TestValidateReportsEachBadKey(t *testing.T) {
	cfg := Config{
		On: []string{"breaker_open", "sometimes"},
		Steps: []StepConfig{
			{Type: "cache"},
			{Type: StepStatic, Body: "x"},
			{Type: StepStale},
			{Type: StepBackup},
			{Type: StepStale, MaxAge: time.Second, Status: 200},
			{Type: StepStatic, Status: 503, Body: "a", BodyFile: "b"},
		},
		Cache: CacheConfig{MaxEntries: -1, MaxBytes: 100, MaxResponseBytes: 200},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken config")
	}
	var keys []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *field.Error
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *field.Error", e)
		}
		keys = append(keys, fe.Path)
	}
	want := "on[1] steps[0].type steps[1].status steps[2].max_age steps[3].upstream steps[4].status steps[5].body_file cache.max_entries cache.max_response_bytes"
	if got := strings.Join(keys, " "); got != want {
		t.Fatalf("keys = %q\nwant   %q\nerror: %v", got, want, err)
	}
	if !strings.Contains(err.Error(), `step type "cache" is unknown`) {
		t.Fatalf("unknown step error does not explain itself: %v", err)
	}
	if err := (Config{}).Validate(); err == nil {
		t.Fatal("a fallback without steps must not validate")
	}
}

func TestCheckUpstreams(t *testing.T) {
	cfg := Config{Steps: []StepConfig{{Type: StepBackup, Upstream: "orders-dr"}, {Type: StepBackup, Upstream: "typo"}}}
	err := cfg.CheckUpstreams(func(n string) bool { return n == "orders-dr" })
	if err == nil || err.Error() != `steps[1].upstream: backup upstream "typo" is not defined` {
		t.Fatalf("CheckUpstreams = %v", err)
	}
}
