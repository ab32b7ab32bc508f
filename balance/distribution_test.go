package balance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/endpoint"
)

// TestSharesFollowWeights pins each policy's share per endpoint over 100k
// sequential picks (Done right away, 1ms each): the weight share for the
// weighted policies, an equal share for round_robin and random, and for
// consistent_hash the share its ring's arcs give (itself within 5 points of
// the weights: a ring with 160 points per unit of weight is that uneven).
func TestSharesFollowWeights(t *testing.T) {
	for _, policy := range builtinPolicies {
		for _, w := range [][]int{{5, 3, 1}, {1, 1, 1}} {
			t.Run(fmt.Sprintf("%s/%v", policy, w), func(t *testing.T) {
				eps := newEndpoints(w...)
				b := mustNew(t, testConfig(policy), 1)
				b.Update(setOf(eps))
				got := shares(t, b, eps, 100_000, hashing(policy), endpoint.Outcome{Latency: time.Millisecond})
				want := weightShares(w)
				switch policy {
				case RoundRobinName, RandomName:
					want = weightShares(equalWeights(len(w)))
				case ConsistentHashName:
					arcs := ringShares(b.(*ConsistentHash).snap.Load(), len(eps))
					checkShares(t, "ring arcs against weights", arcs, want, 0.05)
					want = arcs
				}
				checkShares(t, policy, got, want, 0.02)
			})
		}
	}
}

// ringShares is the fraction of the hash space each endpoint owns.
func ringShares(s *ringSnap, n int) []float64 {
	out := make([]float64, n)
	prev := s.points[len(s.points)-1]
	for i, p := range s.points {
		out[s.owners[i]] += float64(p-prev) / math.Exp2(64) // wraps for i == 0
		prev = p
	}
	return out
}

func TestWeightedRoundRobinIsNginxSmooth(t *testing.T) {
	eps := newEndpoints(5, 1, 1)
	b := mustNew(t, Config{Policy: WeightedRoundRobinName}, 1)
	b.Update(setOf(eps))
	names := map[*endpoint.Endpoint]string{eps[0]: "a", eps[1]: "b", eps[2]: "c"}
	var got strings.Builder
	for range 21 {
		r, err := b.Pick(&Info{})
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(names[r.Endpoint])
		r.Done(endpoint.Outcome{})
	}
	if want := strings.Repeat("aabacaa", 3); got.String() != want {
		t.Fatalf("weights 5,1,1 picked %s, want %s (nginx's smooth order)", got.String(), want)
	}
}

// nginxSmooth is nginx's ngx_http_upstream_get_peer, step by step: the
// reference that smoothSequence's grouped computation must reproduce.
func nginxSmooth(w []int64) []int {
	cur := make([]int64, len(w))
	var total int64
	for _, x := range w {
		total += x
	}
	var seq []int
	for range total {
		best := -1
		for i, x := range w {
			cur[i] += x
			if best == -1 || cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		seq = append(seq, best)
	}
	return seq
}

func TestSmoothSequenceMatchesNginxStepByStep(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := range 200 {
		n := 1 + r.IntN(12)
		w := make([]int64, n)
		for i := range w {
			w[i] = 1 + r.Int64N(int64(1+r.IntN(9))) // repeats likely: groups matter
		}
		eps := newEndpoints(equalWeights(n)...)
		seq := smoothSequence(eps, w)
		want := nginxSmooth(w)
		if len(seq) != len(want) {
			t.Fatalf("trial %d weights %v: cycle %d, want %d", trial, w, len(seq), len(want))
		}
		for i := range seq {
			if seq[i] != eps[want[i]] {
				t.Fatalf("trial %d weights %v: step %d differs from nginx", trial, w, i)
			}
		}
	}
}

func TestCycleWeightsReduceAndCap(t *testing.T) {
	w := cycleWeights(newEndpoints(10, 20, 30), nil)
	if !slices.Equal(w, []int64{1, 2, 3}) {
		t.Errorf("weights 10,20,30 give cycle weights %v, want [1 2 3] (gcd)", w)
	}
	big := cycleWeights(newEndpoints(10000, 9999, 1, 7), nil)
	var sum int64
	for _, x := range big {
		sum += x
	}
	if sum > maxCycle+4 || big[2] < 1 {
		t.Errorf("weights 10000,9999,1,7 give %v (sum %d), want sum <= %d and every weight >= 1", big, sum, maxCycle+4)
	}
}

// chiSquare is Pearson's statistic of counts against expected fractions.
func chiSquare(counts []int, want []float64) float64 {
	total := 0
	for _, c := range counts {
		total += c
	}
	var x float64
	for i, c := range counts {
		e := want[i] * float64(total)
		x += (float64(c) - e) * (float64(c) - e) / e
	}
	return x
}

// Critical values of the chi-square distribution at p = 0.001.
var chi2Critical001 = map[int]float64{2: 13.816, 9: 27.877}

func TestRandomPassesChiSquare(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		weights []int
	}{
		{RandomName, equalWeights(10)},
		{WeightedRandomName, []int{5, 3, 1}},
		{WeightedRandomName, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.policy, tc.weights), func(t *testing.T) {
			eps := newEndpoints(tc.weights...)
			b := mustNew(t, Config{Policy: tc.policy}, 42)
			b.Update(setOf(eps))
			counts := make([]int, len(eps))
			for range 100_000 {
				r, _ := b.Pick(&Info{})
				counts[slices.Index(eps, r.Endpoint)]++
				r.Done(endpoint.Outcome{})
			}
			want := weightShares(tc.weights)
			if tc.policy == RandomName {
				want = weightShares(equalWeights(len(eps)))
			}
			x, crit := chiSquare(counts, want), chi2Critical001[len(eps)-1]
			if x > crit {
				t.Fatalf("chi-square %.2f > %.3f (df %d, p = 0.001): counts %v are not drawn from %s", x, crit, len(eps)-1, counts, pct(want))
			}
		})
	}
}

func TestSamplerMatchesWeightsExactly(t *testing.T) {
	w := []float64{5, 3, 1, 0.5}
	s := newSampler(w)
	// Every column's coin and alias together give each index exactly its
	// share of the probability mass.
	mass := make([]float64, len(w))
	for i := range w {
		p := float64(s.prob[i]) / (1 << 32)
		mass[i] += p
		mass[s.alias[i]] += 1 - p
	}
	for i := range w {
		if want := w[i] / 9.5 * float64(len(w)); math.Abs(mass[i]-want) > 1e-6 {
			t.Errorf("index %d has mass %.6f, want %.6f", i, mass[i], want)
		}
	}
}
