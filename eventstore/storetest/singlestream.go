package storetest

import (
	"context"
	"fmt"
	"strings"

	"github.com/turnstile/turnstile/eventstore"
)

// SingleStream wraps s so that it behaves like a backend without atomic
// multi-stream appends (KurrentDB): AtomicMultiStream reports false and
// AppendMulti of more than one stream fails with eventstore.ErrMultiStream,
// writing nothing. Everything else is s's. Tests use it to run code that
// must also work on such a backend against a fast in-memory store.
func SingleStream(s eventstore.Store) eventstore.Store { return singleStream{s} }

type singleStream struct{ eventstore.Store }

func (singleStream) AtomicMultiStream() bool { return false }

func (s singleStream) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if len(appends) > 1 {
		if err := eventstore.ValidateAppends(appends); err != nil {
			return eventstore.AppendResult{}, err
		}
		names := make([]string, len(appends))
		for i := range appends {
			names[i] = appends[i].Stream
		}
		return eventstore.AppendResult{}, fmt.Errorf("append to %s: %w", strings.Join(names, ", "), eventstore.ErrMultiStream)
	}
	return s.Store.AppendMulti(ctx, appends...)
}
