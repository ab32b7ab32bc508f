package clienttest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/switchboard-dev/switchboard/client/clienttest"
	"github.com/switchboard-dev/switchboard/registry"
)

// A fleet of three behind the embedded registry: one crashes, one turns
// sick, the registry goes down and comes back. In a test, pass the test's
// t instead of the stand-in.
func Example() {
	t := newExampleT()
	defer t.finish()
	ctx := context.Background()

	reg := clienttest.StartRegistry(t)
	fleet := clienttest.StartHTTPFleet(t, reg, 3, clienttest.Options{Service: "orders"})
	passing := registry.Query{Service: "orders", PassingOnly: true}
	insts, _ := reg.Client().Instances(ctx, passing)
	fmt.Println("passing at the start:", len(insts))

	// A crash: connections are cut, and the registry drops the instance
	// at its next check. Await waits for that instead of sleeping.
	fleet[0].Kill()
	insts = reg.Await(t, passing, fleet[1].ID(), fleet[2].ID())
	fmt.Println("passing after a crash:", len(insts))

	// A sick instance the registry keeps listing: its health check passes.
	fleet[1].Fail(http.StatusServiceUnavailable)
	resp, err := http.Get(fleet[1].URL())
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("the sick one answers", resp.StatusCode)

	// A registry outage, and its end: the registrations are back.
	reg.Stop()
	_, err = reg.Client().Instances(ctx, passing)
	fmt.Println("registry down, query fails:", err != nil)
	reg.Restart()
	fleet[0].Revive() // back on the same address, passing again
	insts = reg.Await(t, passing, fleet[0].ID(), fleet[1].ID(), fleet[2].ID())
	fmt.Println("passing after the restart and the revival:", len(insts))
	fmt.Println("requests served:", fleet[0].Requests(), fleet[1].Requests(), fleet[2].Requests())
	// Output:
	// passing at the start: 3
	// passing after a crash: 2
	// the sick one answers 503
	// registry down, query fails: true
	// passing after the restart and the revival: 3
	// requests served: 0 1 0
}

// exampleT stands in for the *testing.T that examples do not get: it
// implements the testing.TB methods clienttest calls.
type exampleT struct {
	testing.TB // nil: any other method panics
	cleanups   []func()
	dirs       []string
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()                   {}
func (t *exampleT) Log(...any)                {}
func (t *exampleT) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "clienttest-example-")
	if err != nil {
		panic(err)
	}
	t.dirs = append(t.dirs, dir)
	return dir
}

func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	for _, d := range t.dirs {
		os.RemoveAll(d)
	}
}
