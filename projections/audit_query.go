package projections

import "context"

// Audit checks the whole log the façade reads (see the package function
// Audit for the rules): archive + live log with an archive (WithArchive);
// without one, a live log that gave up its prefix from a checkpoint
// (AuditLive: the report's From says where it started and what it could
// not judge). A full read, for an operator's button, not a hot path.
func (q *Queries) Audit(ctx context.Context) (*AuditReport, error) {
	if q.history != nil {
		return Audit(ctx, q.history, nil)
	}
	return AuditLive(ctx, q.store, nil)
}
