package projections

import "context"

// Audit checks the whole log the façade reads (see the package function
// Audit for the rules): a full read of the log, for an operator's button,
// not a hot path.
func (q *Queries) Audit(ctx context.Context) (*AuditReport, error) {
	return Audit(ctx, q.store, nil)
}
