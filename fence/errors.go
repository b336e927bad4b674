package fence

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrStale is the sentinel matched by every refusal: a write carried a
// token older than the newest token already accepted for the resource.
// Test for it with errors.Is; the concrete error is a *StaleError.
var ErrStale = errors.New("fence: stale token")

// ErrInvalid reports a caller error: an empty resource or key, a token
// <= 0, a nil database, client or callback, a bad table name, or a Redis
// key that holds a value of another type. It is always returned wrapped
// with detail; test for it with errors.Is.
var ErrInvalid = errors.New("fence: invalid argument")

// ErrBusy is matched by the error of a Check that waited for the resource's row longer than
// the lock wait of SQL.WithBounds: another transaction holds the row and has not ended. Nothing
// was written; try again later, or give up the work.
var ErrBusy = errors.New("fence: the resource's row is locked by another transaction")

// ErrNotFound is the error of Redis.Get for a key that holds no value. The error matches
// redis.Nil too, as it did before ErrNotFound was added.
var ErrNotFound = errors.New("fence: no value stored")

// StaleError is returned when a guard refuses a write because Token is
// older than the newest token already accepted for Resource.
//
// Latest is that newest token, or 0 when it is not known (CheckRows cannot
// know it). errors.Is(err, ErrStale) is true for every *StaleError.
type StaleError struct {
	Resource string
	Token    int64
	Latest   int64
}

// Error describes the resource, the refused token and the latest token.
func (e *StaleError) Error() string {
	latest := "unknown"
	if e.Latest > 0 {
		latest = strconv.FormatInt(e.Latest, 10)
	}
	return fmt.Sprintf("fence: stale token %d for resource %q (latest accepted token: %s)",
		e.Token, e.Resource, latest)
}

// Is reports whether target is ErrStale, so that errors.Is(err, ErrStale)
// matches a *StaleError anywhere in an error chain.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// validate checks the arguments shared by all guards.
func validate(resource string, token int64) error {
	if resource == "" {
		return fmt.Errorf("%w: empty resource", ErrInvalid)
	}
	if token <= 0 {
		return fmt.Errorf("%w: token %d for resource %q must be > 0", ErrInvalid, token, resource)
	}
	return nil
}
