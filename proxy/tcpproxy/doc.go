// Package tcpproxy is switchboard's L4 data plane: a TCP listener that
// forwards each connection to an endpoint of an upstream, picked by the
// same balancers, pools and health machinery as the HTTP proxy.
//
// A connection goes: accept -> admission (MaxConns, optional queue) ->
// PROXY header (from trusted sources only) -> ClientHello server name (SNI
// listeners only) -> pick and connect (ConnectTimeout per attempt, the next
// endpoint on failure, up to ConnectAttempts) -> optional PROXY header to
// the endpoint -> forward both ways until both sides are done.
//
// # Engines
//
// Config.Engine chooses what serves a listener's connections. On Linux the
// event loop (the default, EngineAuto, for a listener without SNI routes
// and AcceptProxyProtocol, which read a connection's first bytes before
// forwarding it): GOMAXPROCS-1 loops of proxy/evloop accept on the
// listening socket, admit, pick, connect without blocking (ConnectTimeout
// a loop deadline) and splice both ways through pipes from a per-loop
// pool, with no goroutine per connection; admission, picks and outcomes,
// metrics, Stats, close causes, Update and Shutdown are the goroutine
// engine's. Elsewhere, and with EngineGoroutine, a goroutine per
// connection, as below. A Listener's engine is fixed (Listener.Engine);
// Server moves a listener whose engine changes to a new Listener on the
// same socket.
//
// # Forwarding
//
// On the goroutine engine bytes move between the two *net.TCPConn with
// (*net.TCPConn).ReadFrom,
// which on Linux is splice(2): they never enter user space. Bytes read
// before forwarding (a PROXY header's trailing data, the ClientHello) are
// written to the endpoint first, unchanged, and then the raw connections
// are spliced. When one side's read ends with EOF, the other side's write
// half is closed (CloseWrite), so half-closed protocols work; the
// connection closes when both directions are done, or at once on an error.
//
// The idle timeout is checked without touching the data path: every
// quarter of IdleTimeout a timer reads the kernel's byte counters of both
// sockets (TCP_INFO); a connection whose counters have not moved for
// IdleTimeout is closed. Those same counters advance the byte metrics of
// long connections. (On the event loop a splice that receives bytes notes
// the loop's clock, and a lazy evloop.Deadline closes the connection
// IdleTimeout after the last.) A connection that fails (a reset, a broken
// pipe) is closed with a reset on both sides, on either engine.
//
// # Picks and outcomes
//
// Each connect attempt is a pick. A failed connect is reported at once
// (Done with the error), which feeds passive health: an endpoint that
// refuses connections is ejected after a few, and the client never sees
// it, because the connection moves on to the next endpoint. A successful
// connect holds its pick for the life of the connection and reports it
// (Done with the connect time as latency and no error) when the connection
// ends. So an endpoint's in-flight count is its number of open connections,
// which is what least_conn and p2c should balance for long-lived TCP; the
// price is that passive health hears of a success only when the connection
// closes. What happens after connect (a reset, an idle close) does not
// count against the endpoint: it may be the client's doing.
//
// Connections are Info.Key'ed by client IP (the PROXY header's source when
// one was accepted) for consistent_hash and maglev.
//
// # Lifecycle
//
// Listen (a socket without per-connection keep-alive), NewListener, then
// Serve in a goroutine; Update swaps settings for new
// connections without touching established ones; Shutdown stops accepting,
// drains until its context is done and then cuts what is left. A
// connection's goroutine, once done, waits for the listener's next
// connection (up to 256 wait; Shutdown ends them), keeping the stack it
// grew while dialing.
package tcpproxy
