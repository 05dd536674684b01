package remote

// Deadlines returns how many runs the service keeps a deadline for.
func (s *Service) Deadlines() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.due)
}
