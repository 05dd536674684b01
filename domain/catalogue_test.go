package domain_test

import (
	"slices"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// TestCatalogueOwnersMatchHandoffRule: the owners the catalogue allows for an
// execution event are exactly the owners the handoff rule lets write it.
func TestCatalogueOwnersMatchHandoffRule(t *testing.T) {
	t.Parallel()
	for _, typ := range domain.ExecutionEventTypes() {
		var fromRule []domain.Owner
		for _, r := range handoffSpec {
			if r.typ == typ {
				fromRule = append(fromRule, r.owner)
			}
		}
		spec, _ := domain.NewCatalogue().Spec(typ)
		if got, want := sortedOwners(spec.Owners), sortedOwners(fromRule); !slices.Equal(got, want) {
			t.Errorf("%s: catalogue owners %v, handoff rule owners %v", typ, got, want)
		}
	}
}

func sortedOwners(os []domain.Owner) []domain.Owner {
	out := slices.Clone(os)
	slices.Sort(out)
	return slices.Compact(out)
}
