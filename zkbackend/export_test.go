package zkbackend

import (
	"context"

	"github.com/fencelock/fencelock/driver"
)

// AcquireRetry is the acquisition a caller makes after a create with guid whose reply was
// lost: protection mode must find the node that create may have made.
func (b *Backend) AcquireRetry(ctx context.Context, req driver.Request, guid string, queued bool) (driver.Grant, error) {
	return b.acquire(ctx, req, guid, queued, true)
}

// AcquireGUID is AcquireQueued with a chosen GUID, so that a test can recognise its requests.
func (b *Backend) AcquireGUID(ctx context.Context, req driver.Request, guid string) (driver.Grant, error) {
	return b.acquire(ctx, req, guid, true, false)
}

// NodeStem is the name of a sequential lock node before ZooKeeper appends the sequence.
func NodeStem(guid string) string { return nodeStem(guid) }

// NewGUID returns a fresh node GUID.
func NewGUID() string { return newGUID() }

// EncodeData encodes a lock node's data.
func EncodeData(owner string, holds ...string) []byte {
	return lockData{owner: owner, holds: holds}.encode()
}

// Owed returns the number of removals the Backend still owes, the one in progress included.
func (b *Backend) Owed() int {
	return b.owed.Len()
}

// OwnerTag is the tag of owner's permit nodes in their names.
func OwnerTag(owner string) string { return ownerTag(owner) }

// Held returns what the Backend remembers of owner's hold of name under limit, and Remember
// makes it remember h again: a test makes that memory stale with the two.
func (b *Backend) Held(name, owner string, limit int) (any, bool) {
	return b.holding(keyOf(name, owner, limit))
}

func (b *Backend) Remember(name, owner string, limit int, h any) {
	b.remember(keyOf(name, owner, limit), h.(holding))
}
