package shardhist_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-dev/switchboard/internal/shardhist"
)

// A route resolves its series once and observes into it per request; the
// app deletes the series of a route that is gone through the MetricVec.
// (The values are exact in binary: a sum's last bits otherwise depend on
// how observations fell into shards.)
func ExampleNewHistogramVec() {
	reg := prometheus.NewRegistry()
	duration := shardhist.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_http_request_duration_seconds",
		Help:    "Time from routing a request to the end of its response.",
		Buckets: []float64{.1, .5, 1},
	}, []string{"route"})
	reg.MustRegister(duration)

	orders := duration.WithLabelValues("orders")
	for _, seconds := range []float64{.0625, .25, .375, 2} {
		orders.Observe(seconds)
	}

	mfs, _ := reg.Gather()
	h := mfs[0].GetMetric()[0].GetHistogram()
	for _, b := range h.GetBucket() {
		fmt.Printf("le %v: %d\n", b.GetUpperBound(), b.GetCumulativeCount())
	}
	fmt.Println("count:", h.GetSampleCount(), "sum:", h.GetSampleSum())

	var gone *prometheus.MetricVec = duration.MetricVec
	fmt.Println("deleted:", gone.DeleteLabelValues("orders"))
	// Output:
	// le 0.1: 1
	// le 0.5: 3
	// le 1: 3
	// count: 4 sum: 2.6875
	// deleted: true
}
