// Request bodies have a deadline: a client that sends its body slowly (a
// byte now and then) holds a connection and a goroutine only for so long.

package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// bodyDeadline wraps next: a request with a body must send it within
// timeout of its start. Up to buffer bytes of it are read here, before
// next runs, and then the connection's read deadline is lifted (a long
// poll or a feed must not be cut by it); the rest, if any, stays under the
// deadline for next to read. A body that does not arrive in time gets 408
// and the connection is closed.
func bodyDeadline(next http.Handler, timeout time.Duration, buffer int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			next.ServeHTTP(w, r) // a connection without deadlines (HTTP/2 test servers)
			return
		}
		buf, err := io.ReadAll(io.LimitReader(r.Body, buffer))
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				w.Header().Set("Connection", "close")
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusRequestTimeout)
				_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://turnstile.dev/problems/body-timeout",
					"title": http.StatusText(http.StatusRequestTimeout), "status": http.StatusRequestTimeout,
					"detail": "the request body did not arrive within " + timeout.String()})
				return
			}
			// Any other failure to read (a body over the API's limit cut
			// by a handler's MaxBytesReader, a client gone) is the
			// handler's to report: hand it what arrived and the error.
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(buf), errReader{err}), r.Body}
			next.ServeHTTP(w, r)
			return
		}
		if int64(len(buf)) < buffer {
			_ = rc.SetReadDeadline(time.Time{}) // the whole body is here
			r.Body = struct {
				io.Reader
				io.Closer
			}{bytes.NewReader(buf), r.Body}
		} else {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		}
		next.ServeHTTP(w, r)
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
