package httpproxy

// SweepMetrics runs one metrics sweep now (sweep.go), for tests that
// cannot wait for the timer.
func (s *Server) SweepMetrics() int { return s.sweepMetrics() }
