package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeTokenFile: serve reads its tokens from --token-file, so no secret
// need be in its argv; a file other users may write is a usage error.
func TestServeTokenFile(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("admin:"+adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o666); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	if code := run(context.Background(), []string{"serve", "--data", t.TempDir(), "--token-file", loose}, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "0600") {
		t.Fatalf("serve with a world-writable token file: exit %d, %s", code, stderr.String())
	}

	tight := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tight, []byte("# the test's tokens\nadmin:"+adminToken+"\nreader:"+readerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, _ := serveInProcess(t, "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--workers", "1", "--token-file", tight)
	get := func(token string) int {
		req, _ := http.NewRequest("GET", url+"/api/v1/actions", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(""); st != http.StatusUnauthorized {
		t.Errorf("anonymous: %d, want 401: the file's tokens are not in force", st)
	}
	if st := get(readerToken); st != http.StatusOK {
		t.Errorf("the file's reader token: %d, want 200", st)
	}
}
