package api_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/api"
)

func TestReadTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "# tokens\n\n  admin:0123456789abcdef0123  \nclient:alice:fedcba9876543210fedc\n", 0o600)
	specs, err := api.ReadTokenFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"admin:0123456789abcdef0123", "client:alice:fedcba9876543210fedc"}; !slices.Equal(specs, want) {
		t.Fatalf("specs %q, want %q", specs, want)
	}
	toks, err := api.ParseTokens(specs[:1])
	if err != nil || toks.Empty() {
		t.Fatalf("ParseTokens of the file's specs: %v", err)
	}

	for name, c := range map[string]struct {
		content string
		mode    os.FileMode
		want    string
	}{
		"world-writable": {"admin:0123456789abcdef0123\n", 0o622, "other users write"},
		"no colon":       {"0123456789abcdef0123-secret\n", 0o600, "line 1"},
	} {
		_, err := api.ReadTokenFile(write(name, c.content, c.mode))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
	if _, err := api.ReadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file was read")
	}
}
