package httpproxy

import (
	"encoding/json"
	"net/http"
)

// CodeNoRoute is the error code of a request that no route matches (404).
// The other codes of the errors the proxy generates are the pipeline's
// (pipeline.CodeRateLimited, ...).
const CodeNoRoute = "no_route"

// CodeBufferFailed is the error code of a request whose body a route's
// buffer_requests could not keep (its directory is full or unwritable):
// 500.
const CodeBufferFailed = "buffer_failed"

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
