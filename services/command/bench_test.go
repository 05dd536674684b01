package command_test

import (
	"context"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/command"
)

// BenchmarkRequest is the request command of `turnstile bench lifecycle`
// on an in-memory log: its cost and allocations an execution.
func BenchmarkRequest(b *testing.B) {
	store := memstore.New(memstore.Options{})
	b.Cleanup(func() { _ = store.Close() })
	cmds := &command.Service{Store: store, Writer: "bench"}
	ctx := context.Background()
	if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "bench.0", Runner: "core.noop"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := cmds.Request(ctx, command.Request{Action: "bench.0"}); err != nil {
			b.Fatal(err)
		}
	}
}
