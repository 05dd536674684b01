package archive

// HeaderReads returns how many index headers scans have read so far.
func HeaderReads() int64 { return readHeaders.Load() }
