package sqlviews

import "context"

// SetBeforeCommit installs a hook that runs in each of p's transactions
// after its rows and checkpoint are written and before the commit; an error
// (or a cancelled context, or the process dying) rolls it back.
func SetBeforeCommit(p *Projector, f func(ctx context.Context, next uint64) error) {
	p.beforeCommit = f
}
