package safety

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// nemEvent is one line of a nemesis worker's output: something it did or saw, stamped with
// the wall clock (Unix ns), which every process on the machine shares.
type nemEvent struct {
	W     int           `json:"w"`            // worker
	K     string        `json:"k"`            // kind: grant, fail, call, write, done, state, leak, renew, stall, close, probe, cleanup
	Op    string        `json:"op,omitempty"` // obtain, try, burst, reenter, refresh, release, permit, permit-try, permit-burst, permit-fill, permit-mixed, campaign, lead, live, live-try
	L     int64         `json:"l,omitempty"`  // the lock handle, unique within the worker
	Name  string        `json:"n,omitempty"`
	Owner string        `json:"o,omitempty"`
	Tok   int64         `json:"t,omitempty"`
	Count int           `json:"c,omitempty"` // grant: the hold count
	TTL   time.Duration `json:"ttl,omitempty"`
	Start int64         `json:"s,omitempty"`  // call: its start; write: just before Valid()
	Ret   int64         `json:"r,omitempty"`  // call: its return; done: when Done closed
	Dl    int64         `json:"dl,omitempty"` // the call's context deadline
	Valid int64         `json:"v,omitempty"`  // ValidUntil: at the grant, or the final one at done
	Class string        `json:"cl,omitempty"` // how a call ended, see errClass; write: accepted or refused
	Err   string        `json:"e,omitempty"`
	Lost  bool          `json:"lost,omitempty"` // done: the lock ended matching ErrLost
	State string        `json:"st,omitempty"`   // state: waiting, holding, releasing, idle
	Th    int           `json:"th,omitempty"`   // state: the thread
	// NoWatchdog says a grant was asked for with the watchdog off: its lock is renewed only
	// if an earlier grant of the same owner and token in this worker had it on.
	NoWatchdog bool `json:"nowd,omitempty"`
	// Weight is, for a grant of a permit, how many permits it takes (0 for 1); an RWLock's
	// write lock takes fencelock.RWReaders.
	Weight int `json:"wt,omitempty"`
	// Limit is, for a grant or a failure of a semaphore's permit, the limit the call asked for.
	Limit int `json:"lim,omitempty"`
	// Bad says the call's arguments were invalid on purpose (a TTL below MinTTL, a renewal
	// interval that does not fit the TTL): it must fail with ErrInvalid, and only such a call may.
	Bad bool `json:"bad,omitempty"`
	// Holders is, for a probe, who Inspect said holds the name: each holder's owner and token.
	Holders []nemHolder `json:"hs,omitempty"`
	// MaxHold, MinHold and Delay are, for a grant or a failure, the lease policy the call asked
	// for (WithMaxHold, WithMinHold, WithLockDelay).
	MaxHold time.Duration `json:"mh,omitempty"`
	MinHold time.Duration `json:"mn,omitempty"`
	Delay   time.Duration `json:"dly,omitempty"`
}

// nemHolder is one holder of a name as the store reported it.
type nemHolder struct {
	Owner string `json:"o"`
	Tok   int64  `json:"t,omitempty"`
}

// errClass names what an error means to the checkers.
func errClass(err error) string {
	var held *fencelock.HeldError
	var limit *fencelock.LimitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &limit):
		return "limit" // a caller that disagrees on a semaphore's limit: refused by design
	case errors.Is(err, fencelock.ErrUpgrade):
		return "upgrade"
	case errors.Is(err, fencelock.ErrInvalid):
		return "invalid"
	case errors.Is(err, fencelock.ErrClosed):
		return "closed"
	case errors.As(err, &held):
		return "held"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "ctx"
	case errors.Is(err, fencelock.ErrLost):
		return "lost"
	case errors.Is(err, fencelock.ErrNotHeld):
		return "notheld"
	case errors.Is(err, fencelock.ErrNotObtained):
		return "notobtained"
	case errors.Is(err, fencelock.ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

// eventOut writes a worker's events, one JSON line each, flushed at once so that the nemesis
// knows what the worker is doing. It is safe for concurrent use.
type eventOut struct {
	mu sync.Mutex
	w  *bufio.Writer
	id int
}

func (o *eventOut) emit(e nemEvent) {
	e.W = o.id
	b, _ := json.Marshal(e)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(b)
	o.w.WriteByte('\n')
	o.w.Flush()
}

// readEvents reads a worker's events until r ends, handing each to fn.
func readEvents(r io.Reader, fn func(nemEvent)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e nemEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.K != "" {
			fn(e)
		}
	}
}

// oneLine keeps an error text to one line for the report.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " | ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
