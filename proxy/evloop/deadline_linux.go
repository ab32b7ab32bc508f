//go:build linux

package evloop

import (
	"time"

	"github.com/switchboard-dev/switchboard/internal/clock"
)

// Deadline is a Timer for a time that moves often and is rarely reached:
// a connection's idle timeout, pushed back by every request, or an
// attempt's deadline. Setting it later than the timer that is armed, or
// clearing it, costs no heap operation: the timer fires at the earliest
// time the deadline was set to, and then fires Fire if the deadline has
// come, arms itself again for it if it moved on, or does nothing if it was
// cleared. The zero Deadline is clear. Its owner must Stop it when it goes
// away: a cleared Deadline's timer may still be armed, holding its owner
// until it fires.
type Deadline struct {
	// Fire runs on the loop once the deadline has come.
	Fire func()

	t  Timer
	at int64 // the loop's clock, when Fire is due; 0: clear
	l  *Loop
}

// Pending reports whether d is set.
func (d *Deadline) Pending() bool { return d.at != 0 }

// due is d's timer's Fire.
func (d *Deadline) due() {
	switch {
	case d.at == 0:
	case d.at > clock.Nanos(d.l.now):
		d.l.timers.arm(&d.t, d.at)
	default:
		d.at = 0
		d.Fire()
	}
}

// SetDeadline sets d to at; the zero at clears it. See Deadline.
func (l *Loop) SetDeadline(d *Deadline, at time.Time) {
	if at.IsZero() {
		d.at = 0
		return
	}
	n := max(clock.Nanos(at), 1)
	d.at = n
	if d.t.Armed() && d.t.when <= n {
		return // it fires first, and arms itself again for n
	}
	if d.t.Fire == nil {
		d.l, d.t.Fire = l, d.due
	}
	l.timers.arm(&d.t, n)
}

// StopDeadline clears d and disarms its timer: for an owner that goes
// away.
func (l *Loop) StopDeadline(d *Deadline) {
	d.at = 0
	l.timers.disarm(&d.t)
}
