package archive

// HeaderReads returns how many index headers scans have read so far.
func HeaderReads() int64 { return readHeaders.Load() }

// LookupReads returns how many index headers look-ups have read so far.
func LookupReads() int64 { return lookupReads.Load() }
