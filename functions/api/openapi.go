package api

import (
	_ "embed"
	"net/http"
)

// openapiDoc is the checked-in OpenAPI 3 document; a test keeps it and the
// routes in step.
//
//go:embed openapi.json
var openapiDoc []byte

func (h *Handler) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiDoc)
}
