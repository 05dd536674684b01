package command

import (
	"context"
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/repository"
)

// ErrUnknownResource: no resource has that name (404). It wraps domain.ErrNotFound.
var ErrUnknownResource = fmt.Errorf("unknown resource: %w", domain.ErrNotFound)

// LoadResource folds resource name's stream alone (a resource that was
// never defined has Version -1).
func (c *Service) LoadResource(ctx context.Context, name string) (*domain.Resource, error) {
	rs := domain.NewResources()
	base := func(st *projections.State) int64 { // its start was archived
		if r := st.Resources.Get(name); r != nil {
			rs = domain.RestoreResources(filterResource(st.Resources.Snapshot(), name))
			return r.Version()
		}
		return -1
	}
	if _, err := repository.FoldFromBase(ctx, c.Store, &c.bases, domain.ResourceStream(name), base, func(env *domain.Envelope, ev domain.Event) { rs.Apply(env, ev) }); err != nil {
		return nil, fmt.Errorf("load resource %s: %w", name, err)
	}
	if r := rs.Get(name); r != nil {
		return r, nil
	}
	return domain.NewResources().GetOrEmpty(name), nil
}

func filterResource(sn []domain.ResourceSnapshot, name string) []domain.ResourceSnapshot {
	for _, s := range sn {
		if s.Name == name {
			return []domain.ResourceSnapshot{s}
		}
	}
	return nil
}

// DefineResource defines resource name or changes its limit: created is
// true for a new resource, wrote false when the same limit is defined
// already. A bad name or limit fails with ErrInvalidRequest (domain's
// ErrInvalidPolicy) and writes nothing.
func (c *Service) DefineResource(ctx context.Context, name string, l domain.ResourceLimit) (created, wrote bool, err error) {
	if err := domain.ValidateResourceName(name); err != nil {
		return false, false, err
	}
	if err := l.Validate(); err != nil {
		return false, false, err
	}
	if !eventstore.AtomicMultiStream(c.Store) {
		// A grant that needs a resource is fenced on several streams in
		// one append; this log cannot append so (docs/policies.md, "Resources").
		return false, false, fmt.Errorf("%w: resources need a log with atomic multi-stream appends, and this one has none", ErrInvalidRequest)
	}
	wrote, err = c.updateResource(ctx, name, func(r *domain.Resource) (domain.Event, error) {
		created = !r.Defined()
		if r.Defined() && sameLimit(r.Limit(), l) {
			return nil, nil
		}
		return domain.ResourceDefined{ResourceLimit: l}, nil
	})
	return created, wrote, err
}

func sameLimit(a, b domain.ResourceLimit) bool {
	if a.MaxConcurrent != b.MaxConcurrent || a.KeyField != b.KeyField || (a.RateLimit == nil) != (b.RateLimit == nil) {
		return false
	}
	return a.RateLimit == nil || *a.RateLimit == *b.RateLimit
}

// DeleteResource deletes resource name. usedBy lists the actions whose
// policies name it, as the caller last saw them: a resource in use fails
// with domain.ErrConflict and writes nothing. An unknown resource fails
// with ErrUnknownResource.
func (c *Service) DeleteResource(ctx context.Context, name string, usedBy []string) error {
	if len(usedBy) > 0 {
		return fmt.Errorf("%w: resource %q is named by the policy of %q", domain.ErrConflict, name, usedBy[0])
	}
	_, err := c.updateResource(ctx, name, func(r *domain.Resource) (domain.Event, error) {
		if !r.Defined() {
			return nil, fmt.Errorf("resource %q: %w", name, ErrUnknownResource)
		}
		return domain.ResourceDeleted{}, nil
	})
	return err
}

func (c *Service) updateResource(ctx context.Context, name string, decide func(*domain.Resource) (domain.Event, error)) (bool, error) {
	if err := domain.ValidateResourceName(name); err != nil {
		return false, fmt.Errorf("resource %q: %w", name, ErrUnknownResource)
	}
	stream := domain.ResourceStream(name)
	for attempt := 0; ; attempt++ {
		r, err := c.LoadResource(ctx, name)
		if err != nil {
			return false, err
		}
		ev, err := decide(r)
		if err != nil || ev == nil {
			return false, err
		}
		env, err := codec.Events.Encode(c.freshID(), ev, domain.OwnerAPI, c.Writer)
		if err != nil {
			return false, err
		}
		env.Metadata = domain.PrincipalMetadata(repository.PrincipalFrom(ctx))
		_, err = c.Store.Append(ctx, stream, repository.Expected(r.Version()), env)
		if err == nil {
			return true, nil
		}
		if !repository.LostRace(err) || attempt >= repository.MaxRetries {
			return false, storeError(fmt.Errorf("append %s to %s: %w", ev.EventType(), stream, err))
		}
	}
}

// checkNeeds refuses (ErrInvalidPolicy) a decided definition or policy
// change that names a resource that is not defined, or more units than
// its max_concurrent.
func (c *Service) checkNeeds(ctx context.Context, ev domain.Event) error {
	var p domain.Policy
	switch e := ev.(type) {
	case domain.ActionDefined:
		p = e.Policy
	case domain.ActionPolicyChanged:
		p = e.Policy
	default:
		return nil
	}
	if p.Resources == nil {
		return nil
	}
	rs := domain.NewResources()
	for _, n := range p.Resources {
		r, err := c.LoadResource(ctx, n.Name)
		if err != nil {
			return err
		}
		if r.Defined() {
			rs.Define(n.Name, r.Limit())
		}
	}
	return rs.CheckNeeds(p.Resources)
}
