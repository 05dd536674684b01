package projections

import (
	"reflect"
	"testing"
)

// TestFingerprintBeforeTheAddedFields: without the fields tagged
// `snapshot:"added"`, the snapshot types have the fingerprints of the
// build before them (commit 81883d5), so its checkpoints and snapshot
// files decode; with them, the fingerprints differ.
func TestFingerprintBeforeTheAddedFields(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{&StateSnapshot{}, "de44786866422de9c79f6e01a9ad0fdb5ec6928c9c4dc68dfcd564b053d7d3db"},
		{&ViewsSnapshot{}, "b320d528f1253a641f6857566c7412caff724f106ff07b8b2fd75a361055dffa"},
	} {
		ty := reflect.TypeOf(c.v)
		if got := typeFingerprintBefore(ty); got != c.want {
			t.Errorf("%s before the added fields: %s, want %s: a snapshot type changed, and that build's checkpoints no longer decode", ty, got, c.want)
		}
		if typeFingerprint(ty) == c.want {
			t.Errorf("%s: the added fields do not change its fingerprint", ty)
		}
	}
}
