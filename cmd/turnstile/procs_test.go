package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestProcessCommandsRefuseBadUsage: executor and worker run only on a
// shared log, serve without an executor only on one too, and bad flag values
// are usage errors (exit 2) that say why, before anything is opened.
func TestProcessCommandsRefuseBadUsage(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"executor"}, "needs --store postgres://"},
		{[]string{"executor", "--store", "embedded://" + dir}, "only on a shared log"},
		{[]string{"executor", "--store", "memory://"}, "only on a shared log"},
		{[]string{"executor", "--store", "postgres://u@127.0.0.1:1/db", "--worker-lease", "1ms"}, "--worker-lease"},
		{[]string{"worker", "--store", "embedded://" + dir, "--id", "w1"}, "only on a shared log"},
		{[]string{"worker", "--store", "postgres://u@127.0.0.1:1/db", "--id", "w1", "--slots", "0"}, "--slots"},
		{[]string{"worker", "--store", "postgres://u@127.0.0.1:1/db", "--id", ""}, "--id"},
		{[]string{"serve", "--data", dir, "--executor=false"}, "needs a shared log"},
		{[]string{"healthcheck"}, "usage"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", c.args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: stderr %q does not say %q", c.args, errOut.String(), c.want)
		}
	}
}
