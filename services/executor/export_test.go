package executor

// SetBeforeAppend makes e call f with each decided op's description (such
// as "expire <id>") before appending it, so a test can hold a decision
// while something else writes first. Set it before Start.
func SetBeforeAppend(e *Executor, f func(what string)) { e.beforeAppend = f }
