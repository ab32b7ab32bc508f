// Package clienttest helps you test your own resilience settings — retries,
// timeouts, circuit breakers, rate limits, discovery — against real sockets
// instead of mocks: an embedded registry on a loopback port, and a small
// fleet of HTTP and gRPC servers that register with it and that a test can
// kill, slow down, make fail and revive.
//
// Everything is tied to a testing.TB: what a helper starts is stopped by
// t.Cleanup, and a helper that cannot do its job fails the test with a
// message that says what it was doing. Nothing needs a network beyond
// 127.0.0.1, nor any program besides the test binary.
//
// # The registry
//
// StartRegistry starts switchboard's embedded registry (package registryd),
// which speaks Consul's HTTP API, on a free port:
//
//	reg := clienttest.StartRegistry(t)
//	reg.Addr()    // "127.0.0.1:41234": give it to any Consul client
//	reg.Client()  // a registry/consul backend for it: Registrar, Heartbeater, Discoverer
//	reg.Server()  // the registryd.Server itself, for in-process calls
//
// To test a registry outage, Stop it (its port refuses connections, watches
// fail) and Restart it: it comes back on the same address with the
// registrations it had, as a Consul agent with a data directory does.
//
// Await waits, with a deadline, until a query's instances are exactly the
// ones you name; with PassingOnly it waits for the registry's health
// verdicts too, so a test never sleeps to let the registry catch up:
//
//	reg.Await(t, registry.Query{Service: "orders", PassingOnly: true}, a.ID(), b.ID())
//
// # The fleet
//
// StartHTTP and StartGRPC start one server on a free loopback port;
// StartHTTPFleet and StartGRPCFleet start several alike. Given a Registry,
// each registers under Options.Service with a health check (an HTTP check
// of HealthPath, a TCP check for gRPC) and returns once the registry lists
// it passing. Pass a nil Registry for servers that register nowhere (a
// static target list).
//
// An HTTP server answers 200 with its instance ID (or runs
// Options.Handler); a gRPC server serves grpc-go's test service
// (google.golang.org/grpc/interop/grpc_testing), so no protoc is needed to
// call it. Both name themselves on every answer (InstanceHeader,
// InstanceMetadataKey) and count what they receive (Requests). What a test
// can do to a server:
//
//   - Slow(d): add d of latency to every request — for timeouts, hedging,
//     latency-aware balancing.
//   - Fail(code): answer every request with an HTTP status or a gRPC code,
//     while health checks still pass — the sick node the registry does not
//     see, for breakers, retries and passive health.
//   - SetHealthy(false) / SetServing(false): fail the health check instead,
//     so the registry (HTTP) or gRPC health checking drops the server.
//   - Kill(): close the listener and every live connection, as a crash
//     does. The registration stays: the registry lists a dead target until
//     its check notices (Options.NoCheck: never). Deregister first for a
//     graceful shutdown.
//   - Revive(): serve again on the same address, back to passing.
//   - Heal(): remove Slow and Fail.
//
// # A test
//
//	func TestOrdersSurviveADeadNode(t *testing.T) {
//		reg := clienttest.StartRegistry(t)
//		fleet := clienttest.StartHTTPFleet(t, reg, 3, clienttest.Options{Service: "orders"})
//		client := newOrdersClient(reg.Addr()) // your code, your settings
//
//		fleet[0].Kill()
//		for range 100 {
//			if _, err := client.Get(ctx, "/orders/1"); err != nil {
//				t.Fatalf("a dead node leaked an error: %v", err)
//			}
//		}
//		if n := fleet[1].Requests() + fleet[2].Requests(); n < 100 {
//			t.Errorf("the live nodes served %d of 100 requests", n)
//		}
//	}
package clienttest
