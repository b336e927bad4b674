package redlock

// WithoutClockTokens drops the server clock from the fencing token, leaving the quorum counter
// alone: on one machine every node shares a clock, so only without it does a test show that
// the counter's majority read and write keep tokens increasing by themselves.
func WithoutClockTokens() Option { return func(b *Backend) { b.timeTokens = false } }

// Settle waits until the node calls still running after their operations returned (an
// operation returns once a majority decided) have ended, for tests that need every node to
// show an operation's outcome. Nothing else may use the Backend meanwhile.
func (b *Backend) Settle() { b.calls.Wait() }

// FenceScript is the SHA1 and the source of fence.lua, for a test's hook that holds the token
// round's writes back.
var FenceScript = [2]string{fenceScript.Hash(), fenceScript.Source()}

// AcquireScript is the SHA1 and the source of acquire.lua.
var AcquireScript = [2]string{acquireScript.Hash(), acquireScript.Source()}
