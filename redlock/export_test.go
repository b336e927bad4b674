package redlock

// WithoutClockTokens drops the server clock from the fencing token, leaving the quorum counter
// alone: on one machine every node shares a clock, so only without it does a test show that
// the counter's majority read and write keep tokens increasing by themselves.
func WithoutClockTokens() Option { return func(b *Backend) { b.timeTokens = false } }
