package httpproxy

import (
	"encoding/json"
	"net/http"
)

// Error codes of the responses the proxy itself generates. They appear in
// the JSON body's "code" and in the X-Switchboard-Error header.
const (
	CodeNoRoute         = "no_route"                // 404: no route matches
	CodeNoEndpoint      = "no_healthy_endpoint"     // 503: the upstream has no endpoint that can take traffic
	CodeConnectFailed   = "upstream_connect_failed" // 502: no endpoint accepted a connection
	CodeUpstreamTimeout = "upstream_timeout"        // 504: the endpoint did not answer in time
	CodeUpstreamError   = "upstream_error"          // 502: the endpoint broke the exchange
	CodeBodyTooLarge    = "body_too_large"          // 413: request body over max_body_bytes
	CodeBadRequest      = "bad_request"             // 400: the request could not be read
)

// HeaderError names the error code on every proxy-generated error response.
const HeaderError = "X-Switchboard-Error"

// errorBody is the JSON body of a proxy-generated error.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// WriteError answers with a proxy-generated error: the status, the
// X-Switchboard-Error header and the JSON body {"error": msg, "code": code}.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(errorBody{Error: msg, Code: code})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderError, code)
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
