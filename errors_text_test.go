package fencelock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
)

// The texts of the library's own errors, pinned: one line each, what went wrong, and which
// sentinel it matches. Changing one is changing what a user's log says: read it as they would.
func TestErrorTexts(t *testing.T) {
	for _, tc := range []struct {
		err   error
		text  string
		match error
	}{
		{fencelock.ErrNotObtained, "fencelock: not obtained", fencelock.ErrNotObtained},
		{fencelock.ErrNotHeld, "fencelock: not held", fencelock.ErrNotHeld},
		{fencelock.ErrLost, "fencelock: lock lost", fencelock.ErrLost},
		{fencelock.ErrInvalid, "fencelock: invalid argument", fencelock.ErrInvalid},
		{fencelock.ErrUnavailable, "fencelock: backend unavailable", fencelock.ErrUnavailable},
		{fencelock.ErrClosed, "fencelock: client closed", fencelock.ErrClosed},
		{fencelock.ErrUpgrade, "fencelock: invalid argument: no upgrade: a holder may not take more under its hold than it holds", fencelock.ErrInvalid},
		{&fencelock.HeldError{Name: "order:1", Remaining: 1500 * time.Millisecond},
			`fencelock: not obtained: "order:1" is held by another owner for 1.5s more`, fencelock.ErrNotObtained},
		{&fencelock.HeldError{Name: "order:1"}, `fencelock: not obtained: "order:1" is held by another owner`, fencelock.ErrNotObtained},
		{&fencelock.HeldError{Name: "pay", Limit: 2, Remaining: time.Second},
			`fencelock: not obtained: all 2 permits of semaphore "pay" are held, the first for 1s more`, fencelock.ErrNotObtained},
		{&fencelock.HeldError{Name: "pay", Limit: 2}, `fencelock: not obtained: all 2 permits of semaphore "pay" are held or promised to waiters ahead`, fencelock.ErrNotObtained},
		{&fencelock.LimitError{Name: "pay", Limit: 3, Stored: 2},
			`fencelock: invalid argument: semaphore "pay" has limit 2 while its permits are held; this call asked for 3`, fencelock.ErrInvalid},
	} {
		t.Run(tc.text, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.text {
				t.Errorf("text\n got: %s\nwant: %s", got, tc.text)
			}
			if strings.Contains(tc.err.Error(), "\n") {
				t.Error("the text spans lines")
			}
			if !errors.Is(tc.err, tc.match) || !errors.Is(fmt.Errorf("wrapped: %w", tc.err), tc.match) {
				t.Errorf("%v does not match %v", tc.err, tc.match)
			}
		})
	}
}
