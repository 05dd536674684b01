package kurrentdb

import (
	"slices"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/eventstore"
)

// visible reports whether an event of $all belongs to the store with stream
// prefix ns: not a system event (KurrentDB reserves stream names and event
// types starting with "$": metadata, statistics, projections, links) and in
// the namespace.
func visible(ns, stream, typ string) bool {
	if strings.HasPrefix(stream, "$") || strings.HasPrefix(typ, "$") {
		return false
	}
	return len(stream) > len(ns) && strings.HasPrefix(stream, ns)
}

// serverFilter returns the filter the server applies to a subscription of the
// store with stream prefix ns, so that it sends as few events the store must
// drop as it can. The server takes one filter, on stream names or on event
// types, by prefixes or by a regular expression; the store always applies
// visible and f.Match to what arrives, so the server filter may let more
// through but never less:
//
//   - stream prefixes (f's, each behind ns), server-side; types client-side;
//   - else a namespace: the prefix ns, server-side; types client-side;
//   - else types: those types as event-type prefixes server-side ("a.b" also
//     lets "a.bc" through), the exact match client-side;
//   - else everything but system events (types starting with "$").
func serverFilter(ns string, f eventstore.Filter) *esdb.SubscriptionFilter {
	if len(f.StreamPrefixes) > 0 {
		prefixes := make([]string, 0, len(f.StreamPrefixes))
		for _, p := range f.StreamPrefixes {
			prefixes = append(prefixes, ns+p)
		}
		slices.Sort(prefixes)
		prefixes = slices.Compact(prefixes)
		if !slices.Contains(prefixes, "") { // "" would be "no filter": fall through
			return &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: prefixes}
		}
	}
	if ns != "" {
		return &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{ns}}
	}
	if len(f.Types) > 0 {
		types := slices.Clone(f.Types)
		slices.Sort(types)
		types = slices.Compact(types)
		if !slices.Contains(types, "") {
			return &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: types}
		}
	}
	return esdb.ExcludeSystemEventsFilter()
}
