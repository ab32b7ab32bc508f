package grpcclient

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-dev/switchboard/balance"
	"github.com/switchboard-dev/switchboard/endpoint"
)

// picker is an immutable snapshot: the switchboard balancer (whose own
// pick state is lock-free) and the SubConn of each ready endpoint.
type picker struct {
	bal balance.Balancer
	scs subConns
	cfg *lbConfig
	err error // set when there is nothing to pick from
}

// pick is the state of one pick between Pick and Done. Picks are pooled
// so that neither the balance.Info handed to the policy nor the Done
// callback (built once per pick value, as a method value) allocates.
type pick struct {
	info   balance.Info
	start  int64 // endpoint.Nanotime at the pick; 0 when the policy reads no latency
	done   func(endpoint.Outcome)
	loadMD string
	doneFn func(balancer.DoneInfo)
}

var picks sync.Pool

func init() {
	picks.New = func() any {
		p := new(pick)
		p.doneFn = p.finish
		return p
	}
}

func (pk *pick) release() {
	pk.info = balance.Info{}
	pk.done = nil
	picks.Put(pk)
}

// finish is the gRPC Done of a pick: the call's outcome and latency go to
// the policy (in-flight counts, latency EWMA, dynamic weights).
func (pk *pick) finish(di balancer.DoneInfo) {
	var lat time.Duration
	var now int64
	if pk.start != 0 {
		now = endpoint.Nanotime()
		lat = time.Duration(now - pk.start)
	}
	// o.At: the policy stamps its averages with the reading that ended
	// the latency rather than reading the clock again.
	o := endpoint.Outcome{Status: 200, Latency: lat, At: now} // Outcome(nil, lat, 0), inline
	switch {
	case di.Err != nil:
		o = Outcome(di.Err, lat, 0)
		o.At = now
	case !di.BytesSent && !di.BytesReceived:
		// gRPC gives a pick back this way when the SubConn's transport
		// went away before the call could use it: nothing happened.
		o = endpoint.Outcome{Canceled: true, At: now}
	}
	if pk.loadMD != "" && di.Trailer != nil {
		if v := di.Trailer.Get(pk.loadMD); len(v) > 0 {
			o.LoadReport = v[0]
		}
	}
	done := pk.done
	pk.release()
	done(o)
}

// errNoEndpoint fails a pick when the policy has no endpoint to give. It
// is no status error, as none of the picker's errors is but ErrNoHashKey:
// gRPC ends a call at once with a picker's status error, WaitForReady or
// not, while it fails a fail-fast call with Unavailable on a plain error
// and lets a WaitForReady call wait for the next picker.
var errNoEndpoint = errors.New("grpcclient: no endpoint available")

// ErrNoHashKey fails a call without a hash key when the hashing
// balancer's missing_key is error. It is the caller's mistake, but gRPC
// does not let a picker fail a call with InvalidArgument (gRFC A54), so
// its code is Internal; Outcome and UnaryFallback know it for what it is:
// no failure of the server, nothing for a fallback to answer. It fails
// the call at once, WaitForReady or not, and matches balance.ErrNoHashKey
// too (errors.Is).
var ErrNoHashKey error = noHashKeyError{status.New(codes.Internal, "grpcclient: the call has no hash key (set it with WithHashKey or in the metadata hash_key names) and the balancer's missing_key is error")}

// hasKeyIn sets info's key from balance.WithHashKey's, if ctx has one.
func hasKeyIn(ctx context.Context, info *balance.Info) bool {
	info.Key, info.HasKey = balance.HashKeyFrom(ctx)
	return info.HasKey
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if p.err != nil {
		return balancer.PickResult{}, p.err
	}
	pk := picks.Get().(*pick)
	var ci *callInfo
	if info.Ctx != nil {
		ci = callInfoFrom(info.Ctx)
	}
	if ci != nil {
		pk.info.Tried = ci.tried
	}
	if p.cfg.hashMD != "" || p.cfg.hashMethod {
		switch {
		case info.Ctx != nil && hasKeyIn(info.Ctx, &pk.info):
		case p.cfg.hashMethod:
			pk.info.Key, pk.info.HasKey = info.FullMethodName, true
		case info.Ctx != nil:
			// FromOutgoingContext copies the metadata: WithHashKey is the
			// allocation-free way.
			if md, ok := metadata.FromOutgoingContext(info.Ctx); ok {
				if v := md[p.cfg.hashMD]; len(v) > 0 {
					pk.info.Key, pk.info.HasKey = v[0], true
				}
			}
		}
	}
	r, err := p.bal.Pick(&pk.info)
	if err != nil {
		pk.release()
		if errors.Is(err, balance.ErrNoHashKey) { // missing_key: error
			return balancer.PickResult{}, ErrNoHashKey
		}
		return balancer.PickResult{}, errNoEndpoint
	}
	sc, ok := p.scs.get(r.Endpoint)
	if !ok {
		// The balancer already has a newer snapshot than this picker: gRPC
		// picks again with the next picker.
		pk.release()
		r.Done(endpoint.Outcome{Canceled: true})
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	if ci != nil && ci.track {
		ci.tried = append(ci.tried, r.Endpoint)
	}
	pk.info = balance.Info{}
	pk.done = r.Done
	pk.loadMD = p.cfg.loadMD
	if p.cfg.latency {
		// The monotonic clock only: half of time.Now's cost. Policies that
		// do not read latency are spared both readings.
		pk.start = endpoint.Nanotime()
	} else {
		pk.start = 0
	}
	return balancer.PickResult{SubConn: sc, Done: pk.doneFn}, nil
}
