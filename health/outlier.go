package health

import (
	"context"
	"errors"
	"math/bits"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/switchboard-dev/switchboard/internal/pshard"
)

// outlierBuckets is how many slices the failure-rate and latency window is cut
// into. Ten keeps the sums cheap on the request path while losing at most a
// tenth of the window when the oldest slice falls off.
const outlierBuckets = 10

// outlierLatBins is the number of latency histogram bins: four per power of two of
// microseconds, up to about 67 s (2^26 µs); slower answers share the last bin.
// Four sub-bins bound the median's error to about 20%, ample for comparing
// against a factor such as 3.
const outlierLatBins = 104

// outlierBucket is one slice of an endpoint's sliding window.
type outlierBucket struct {
	epoch int64 // which slice of time (now / width) the counts belong to
	req   uint32
	fail  uint32
}

// maxOutlierShards caps the shards of an endpoint's window (see
// outlierWindow for what a shard costs).
const maxOutlierShards = 8

// outlierWindow counts requests, failures and (when latency outliers are
// on) a latency histogram of successful requests over the last
// outlierBuckets slices of time. Time is an int64 of nanoseconds on the
// Detector's timeline (see Detector.nanos).
//
// The counts are kept in shards, one per P (package pshard chooses it),
// each behind a mutex of its own, so that the CPUs recording the same
// endpoint's outcomes at once (the proxy's event loops, one per CPU) do
// not take one lock and pull one set of cache lines back and forth on
// every request: a CPU's mutex and counts stay in its cache. The sums and
// the median add the shards up. A shard costs about 320 bytes, and 4,160
// (ten histograms of 104 four-byte bins) more when latency outliers are
// on; an endpoint has the least power of two at least GOMAXPROCS of them,
// at most maxOutlierShards (8): on 2 CPUs 640 bytes, or 9 KB with latency
// histograms, and at most 2.5 KB, or 36 KB, however many CPUs.
//
// The window never allocates after creation.
type outlierWindow struct {
	width  int64  // nanoseconds per outlierBucket
	mask   uint32 // len(shards) - 1, a power of two less one
	shards []outlierShard
}

// outlierShard is one CPU's part of a window.
type outlierShard struct {
	mu  sync.Mutex
	b   [outlierBuckets]outlierBucket
	lat []outlierHist // the buckets' histograms; nil when latency outliers are off
	// The pad keeps the next shard's mutex and counts off these lines.
	// Histograms are not padded: a shard's ten sit between the next
	// shard's and the previous one's, and only the bins of latencies
	// under 4 µs or over half a minute could share a line with another
	// shard's.
	_ [pshard.CacheLine]byte
}

type outlierHist [outlierLatBins]uint32

func newOutlierWindow(span time.Duration, latency bool, shards int) outlierWindow {
	w := outlierWindow{width: int64(span) / outlierBuckets, mask: uint32(shards - 1), shards: make([]outlierShard, shards)}
	if w.width < 1 {
		w.width = 1
	}
	if latency {
		lat := make([]outlierHist, shards*outlierBuckets)
		for i := range w.shards {
			w.shards[i].lat = lat[i*outlierBuckets : (i+1)*outlierBuckets : (i+1)*outlierBuckets]
		}
	}
	return w
}

// lock locks and returns the shard of the calling P. If another CPU holds
// that shard, the P's token moves on (see package pshard) and the caller
// waits for the next shard.
func (w *outlierWindow) lock() *outlierShard {
	t := pshard.Get()
	s := &w.shards[t.Load()&w.mask]
	if !s.mu.TryLock() {
		s = &w.shards[t.Add(1)&w.mask]
		s.mu.Lock()
	}
	pshard.Put(t)
	return s
}

// slot returns the outlierBucket index of s for now, clearing it if it
// last held an older slice of time. s is locked.
func (w *outlierWindow) slot(s *outlierShard, now int64) int {
	e := now / w.width
	i := int(uint64(e) % outlierBuckets)
	if s.b[i].epoch != e {
		s.b[i] = outlierBucket{epoch: e}
		if s.lat != nil {
			s.lat[i] = outlierHist{}
		}
	}
	return i
}

// add records one outcome in the locked shard s. Latency is recorded for
// successes only: a refused connection fails fast and would make a dead
// endpoint look quick.
func (w *outlierWindow) add(s *outlierShard, now int64, failed bool, latency time.Duration) {
	i := w.slot(s, now)
	s.b[i].req++
	if failed {
		s.b[i].fail++
	} else if s.lat != nil {
		s.lat[i][outlierLatBin(latency)]++
	}
}

// live reports whether bucket b holds a slice inside the window ending at
// epoch e.
func (b *outlierBucket) live(e int64) bool {
	return b.epoch <= e && b.epoch > e-outlierBuckets
}

// eachShard calls fn with every shard, under the shard's lock.
func (w *outlierWindow) eachShard(fn func(s *outlierShard)) {
	for k := range w.shards {
		s := &w.shards[k]
		s.mu.Lock()
		fn(s)
		s.mu.Unlock()
	}
}

// eachLive calls fn with every bucket i of every shard s that holds a
// slice inside the window ending at now.
func (w *outlierWindow) eachLive(now int64, fn func(s *outlierShard, i int)) {
	e := now / w.width
	w.eachShard(func(s *outlierShard) {
		for i := range s.b {
			if s.b[i].live(e) {
				fn(s, i)
			}
		}
	})
}

// sums returns the requests and failures within the window ending at now,
// over all shards.
func (w *outlierWindow) sums(now int64) (req, fail uint64) {
	w.eachLive(now, func(s *outlierShard, i int) {
		req += uint64(s.b[i].req)
		fail += uint64(s.b[i].fail)
	})
	return req, fail
}

// median returns the median latency of the successes within the window
// ending at now, over all shards, and how many there were.
func (w *outlierWindow) median(now int64) (time.Duration, uint64) {
	if w.shards[0].lat == nil {
		return 0, 0
	}
	var sum outlierHist
	var n uint64
	w.eachLive(now, func(s *outlierShard, i int) {
		for j, c := range s.lat[i] {
			sum[j] += c
			n += uint64(c)
		}
	})
	if n == 0 {
		return 0, 0
	}
	half := (n + 1) / 2
	var seen uint64
	for j, c := range sum {
		seen += uint64(c)
		if seen >= half {
			return outlierLatValue(j), n
		}
	}
	return outlierLatValue(outlierLatBins - 1), n
}

// reset empties every shard.
func (w *outlierWindow) reset() {
	w.eachShard(func(s *outlierShard) {
		s.b = [outlierBuckets]outlierBucket{}
		clear(s.lat)
	})
}

// outlierLatBin maps a latency to its histogram bin: values below 4 µs get a bin
// each, then every power of two is split into four equal sub-bins (the two
// bits below the leading one), as HDR-style histograms do.
func outlierLatBin(d time.Duration) int {
	if d < 0 {
		d = 0
	}
	v := uint64(d / time.Microsecond)
	if v < 4 {
		return int(v)
	}
	e := bits.Len64(v) - 1
	mant := (v >> (e - 2)) & 3
	bin := 4*(e-1) + int(mant)
	if bin >= outlierLatBins {
		bin = outlierLatBins - 1
	}
	return bin
}

// outlierLatValue is the middle of bin's range, the value a median in that bin is
// reported as.
func outlierLatValue(bin int) time.Duration {
	if bin < 4 {
		return time.Duration(bin) * time.Microsecond
	}
	e := bin/4 + 1
	mant := uint64(bin % 4)
	lo := (4 + mant) << (e - 2)
	width := uint64(1) << (e - 2)
	return time.Duration(lo)*time.Microsecond + time.Duration(width)*time.Microsecond/2
}

// outlierEjectionTime is Envoy's rule: base × the number of times the endpoint has
// been ejected, capped at max (Envoy's outlier detection overview,
// "base_ejection_time ... multiplied by the number of times the host has been
// ejected", and the max_ejection_time field of config.cluster.v3.
// OutlierDetection).
func outlierEjectionTime(base, limit time.Duration, times int) time.Duration {
	if times < 1 {
		times = 1
	}
	if base > 0 && int64(times) > int64(limit/base) {
		return limit // also keeps base × times from overflowing
	}
	return min(base*time.Duration(times), limit)
}

// outlierMaxEjected is how many of n endpoints passive ejection may hold out at
// once: pct percent rounded down, but at least one when the pool has two or
// more endpoints, so that a small pool (say 3 at 20%) can still shed a dead
// node. Envoy documents the same floor for max_ejection_percent ("will eject
// at least one host regardless of the value", v1.7 cluster_outlier_detection)
// and grpc-java followed it (PR 9489). A pool of one is never ejected below
// 100%: ejecting its only endpoint turns errors into 503s and removes the
// traffic that would show it recovered.
func outlierMaxEjected(n, pct int) int {
	m := n * pct / 100
	if m < 1 && n >= 2 {
		m = 1
	}
	return m
}

// describeOutlierFailure names the kind of a failure for a human reason. It runs
// only when a decision is made, never per request: errors.As is not free.
func describeOutlierFailure(err error, status int) string {
	if err == nil {
		if status != 0 {
			return "status " + strconv.Itoa(status)
		}
		return "failure"
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return "connect error"
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return "timeout"
	}
	if errors.Is(err, syscall.ECONNRESET) {
		return "connection reset"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "connect error"
	}
	return "transport error"
}

// roundLatency trims a median to about three significant digits: the
// histogram is not finer than that, and "212.992ms" would claim it is.
func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
