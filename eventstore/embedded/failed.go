// A store that can no longer append says so: after a failed write or fsync
// (a full disk, an I/O error) it takes no more appends, because after a
// failed fsync the kernel may have dropped the pages it could not write
// (the file's state is unknown until it is read again), and only a reopen,
// which checks every record past the last seal, can tell what is durable.

package embedded

// setFailed records the write failure that stopped the store (committer
// only, once).
func (s *Store) setFailed(err error) {
	if s.failedErr.CompareAndSwap(nil, &err) {
		s.log.Error("the log could not be written; appends fail until the store is reopened", "err", err, "head", s.head.Load())
		close(s.failedC)
	}
}

// Failed is closed when the store has stopped taking appends after a
// failed write or fsync; FailedErr says why. Every later Append fails with
// that error, which matches eventstore.ErrClosed (for appends, the store is
// closed: retrying is useless until it is reopened). Reads go on. Nothing an
// Append acknowledged is lost: reopening the directory recovers every
// acknowledged event and cuts what was written but not acknowledged.
func (s *Store) Failed() <-chan struct{} { return s.failedC }

// FailedErr is why the store stopped taking appends; nil while it takes them.
func (s *Store) FailedErr() error {
	if p := s.failedErr.Load(); p != nil {
		return *p
	}
	return nil
}
