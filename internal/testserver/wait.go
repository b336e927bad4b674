package testserver

import (
	"testing"
	"time"
)

// WaitFor polls cond every few milliseconds until it holds, and fails t with what once bound
// has passed: the wait of a test on a state that sends no signal of its own (a key count, a
// queue's length, a process's output). It is not a pause: it returns as soon as cond holds.
func WaitFor(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still waiting: %s", bound, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
