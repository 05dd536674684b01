package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkRequestExecution is POST /api/v1/executions through the whole
// handler (auth, decode, the command side, encode) on an in-memory log.
func BenchmarkRequestExecution(b *testing.B) {
	a, _ := newTestAPI(b, nil)
	h := a.srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		req := localRequest(http.MethodPost, "/api/v1/executions", strings.NewReader(`{"action":"demo","input":{"seconds":1}}`))
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}
