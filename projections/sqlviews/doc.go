// Package sqlviews keeps turnstile's read models as PostgreSQL tables that
// other tools can query with SQL: executions (one row per execution) and
// queue_stats (one row per defined action), with their checkpoint in
// projection_checkpoints.
//
// A Projector folds the log (any eventstore.Store) with projections.Views,
// the fold the HTTP API serves, so a row holds the same fields and values as
// the API's execution and queue_stats resources at the same log position.
// Each transaction upserts the rows that changed since the checkpoint (many
// events per transaction, one statement per table) and moves the checkpoint
// in the same transaction: the tables are always exactly the fold of the
// log below their checkpoint, whatever crashes.
//
// Migrate creates the tables (their own version list, in the table
// read_model_migrations); Check rebuilds them from position 0 into a scratch
// schema and compares; Reset makes the projector start over.
package sqlviews
