package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/internal/settle"
)

// Backend is a driver.Backend and driver.Queue over an etcd cluster. It is safe for
// concurrent use. Close revokes its leases, which releases every lock it holds.
type Backend struct {
	c      *clientv3.Client
	prefix string
	err    error // set when the configuration is unusable; every call returns it

	ctx    context.Context // ends on Close; the sessions' keep-alives run under it
	cancel context.CancelFunc

	id       string        // names the veto keys of this Backend's writes (see flight)
	attempts atomic.Uint64 // the writes made, for their veto keys

	owed     *settle.Ledger[owed] // the releases owed (see owed.go), and their settler
	settlers sync.WaitGroup       // the goroutines awaiting the flying writes, waited for by Close

	mu       sync.Mutex // guards sessions, flying and closed
	sessions map[int]*session
	flying   []*flight // writes whose callers left before their outcome was known
	closed   bool
}

var (
	_ driver.Backend     = (*Backend)(nil)
	_ driver.Queue       = (*Backend)(nil)
	_ driver.OwnerReuser = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of every key. Default: "/fencelock/".
func WithPrefix(p string) Option { return func(b *Backend) { b.prefix = p } }

// New returns a Backend over c. A nil c gives a Backend whose every call fails with an error
// matching driver.ErrInvalid.
func New(c *clientv3.Client, opts ...Option) *Backend {
	b := &Backend{c: c, prefix: "/fencelock/", sessions: make(map[int]*session), id: strconv.FormatUint(rand.Uint64(), 36)}
	for _, o := range opts {
		o(b)
	}
	switch {
	case c == nil:
		b.err = fmt.Errorf("%w: nil etcd client", driver.ErrInvalid)
	case b.prefix == "":
		b.err = fmt.Errorf("%w: empty key prefix", driver.ErrInvalid)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.owed = b.newLedger()
	return b
}

// Close revokes the Backend's leases, releasing its locks, stops their keep-alives and waits
// for the Backend's background work. It takes at most one revoke's timeout (2s) when etcd
// does not answer.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	sessions := b.sessions
	b.sessions = nil
	b.mu.Unlock()
	// Revoked together, so that an unreachable cluster holds Close up for one revoke's
	// timeout, not one per lease.
	var wg sync.WaitGroup
	var mu sync.Mutex // guards failed and first
	failed, first := 0, error(nil)
	for _, s := range sessions {
		wg.Go(func() {
			if err := s.revoke(); err != nil {
				mu.Lock()
				if failed++; first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.cancel()
	b.owed.Close()
	<-b.owed.Done()
	b.settlers.Wait()
	if failed > 0 {
		return classify(fmt.Errorf("%d of %d leases not revoked; their locks expire with them: %w", failed, len(sessions), first))
	}
	return nil
}

// ReusesOwners implements driver.OwnerReuser: etcd keeps a deleted key in its index until
// it is compacted, and each acquisition reads the lock's queue with its traces; a Release or a
// Renew with a Token acts only on the key made at that revision.
func (b *Backend) ReusesOwners() bool { return true }

// queuePrefix is the prefix of the keys of the lock name.
func (b *Backend) queuePrefix(name string) string {
	return b.prefix + url.PathEscape(name) + "/"
}

// Key returns the key that owner's place in the lock name's queue is kept under.
func (b *Backend) Key(name, owner string) string { return b.queuePrefix(name) + owner }

// metaKey is where owner's published metadata for the lock name is kept: beside the queue,
// not in it, on the same lease. It starts with "!", which PathEscape escapes in every name,
// so that no lock's queue prefix is a prefix of it, whatever the Backend's prefix ends with.
func (b *Backend) metaKey(name, owner string) string {
	return b.prefix + "!meta/" + url.PathEscape(name) + "/" + owner
}

// Guard returns a comparison that holds only while lock is still held: its key exists with the
// create revision that is its fencing token. Use it in the If of a transaction that writes data
// kept in etcd, so that a holder that lost its lock without knowing it writes nothing:
//
//	resp, err := cli.Txn(ctx).If(b.Guard(lock)).Then(clientv3.OpPut(k, v)).Commit()
//	if err == nil && !resp.Succeeded { /* the lock was lost: nothing was written */ }
//
// A *fencelock.Lock is a Held. Its token is the one the store issued (StoreToken), whatever
// token base its Client adds (fencelock.WithTokenBase).
func (b *Backend) Guard(lock Held) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(b.Key(lock.Name(), lock.Owner())), "=", lock.StoreToken())
}

// Held is a lock as Guard reads it: *fencelock.Lock is one.
type Held interface {
	Name() string
	Owner() string
	StoreToken() int64
}

func (b *Backend) usable(name string) error {
	if name == "" && b.err == nil {
		return fmt.Errorf("%w: empty lock name", driver.ErrInvalid)
	}
	return b.open()
}

// open says why the Backend can make no call at all: an unusable configuration, or Close.
func (b *Backend) open() error {
	if b.err != nil {
		return b.err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("%w: the etcd backend was closed", driver.ErrClosed)
	}
	return nil
}

// holds is the value of a queue key: the hold count and the IDs of the holds.
type holds []string

func (h holds) encode() string { return strconv.Itoa(len(h)) + "\n" + strings.Join(h, "\n") }

func decodeHolds(v []byte) (holds, error) {
	parts := strings.Split(string(v), "\n")
	n, err := strconv.Atoi(parts[0])
	if err != nil || n != len(parts)-1 {
		return nil, fmt.Errorf("%w: a lock key holds %q, which fencelock did not write", driver.ErrInvalid, v)
	}
	return holds(parts[1:]), nil
}

// has reports whether the hold id is among h; an entry of a permit's hold that takes several
// permits carries their number after a "#" (see entry), which no hold ID contains.
func (h holds) has(id string) bool {
	for _, x := range h {
		if isHold(x, id) {
			return true
		}
	}
	return false
}

func (h holds) without(id string) holds {
	out := make(holds, 0, len(h))
	for _, x := range h {
		if !isHold(x, id) {
			out = append(out, x)
		}
	}
	return out
}

// isHold reports whether the entry x of holds is the hold id.
func isHold(x, id string) bool {
	return x == id || (len(x) > len(id) && x[len(id)] == '#' && x[:len(id)] == id)
}

// classify wraps err with the fencelock error that says what to do about it.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	case errors.Is(err, rpctypes.ErrGRPCKeyNotFound), errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
	case errors.Is(err, rpctypes.ErrEmptyKey), errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("%w: %w", driver.ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

// ttlSeconds rounds a TTL up to the whole seconds a lease has.
func ttlSeconds(ttl time.Duration) int { return int((ttl + time.Second - 1) / time.Second) }
