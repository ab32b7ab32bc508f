package client

// listener is the listener label of the client's request metrics: the
// proxy's request metrics (internal/httpmetrics, the same names and
// labels), with the client in the place of a listener.
const listener = "client"
