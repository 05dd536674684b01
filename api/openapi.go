package api

import (
	_ "embed"
	"net/http"
)

//go:embed openapi.json
var openapiDoc []byte

// openapi serves the OpenAPI 3 document of this API.
func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openapiDoc)
}
