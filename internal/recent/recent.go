// Package recent keeps what was last made of a few hundred strings, so that a hot path asked
// about the same string again takes it instead of allocating it anew: the Redis keys of a
// lock's name, a key boxed into a command's argument list. Neither keeps more than one thing
// per slot of a fixed table, and neither allocates more than making the thing anew does: what
// is kept is what was made.
package recent

import (
	"hash/maphash"
	"sync/atomic"
)

// slots is the size of a table: enough for the names a service locks over and over, few
// enough to cost a few kilobytes.
const slots = 512

var seed = maphash.MakeSeed()

func slot(key string) uint64 { return maphash.String(seed, key) % slots }

// Cache keeps values that know their own string (a pointer type with a Key method), at most
// one per slot: a string whose slot another took since is made again. Its zero value is empty
// and ready, and safe for concurrent use; a value must not change once put, since every Get
// of its key shares it.
type Cache[P interface{ Key() string }] struct {
	table [slots]atomic.Value // each holds a P
}

// Get returns the value put last for key, if its slot still holds it.
func (c *Cache[P]) Get(key string) (p P, ok bool) {
	if p, ok = c.table[slot(key)].Load().(P); ok && p.Key() == key {
		return p, true
	}
	var zero P
	return zero, false
}

// Put keeps p for p.Key(), in place of whatever its slot held.
func (c *Cache[P]) Put(p P) { c.table[slot(p.Key())].Store(p) }

// Boxes keeps strings boxed into interface values, as an argument list ([]any) takes them:
// boxing a string allocates its header. Its zero value is empty and ready, and safe for
// concurrent use.
type Boxes struct {
	table [slots]atomic.Value // each holds a string
}

// Box returns s as an interface value: the one boxed last, if s's slot still holds it.
func (b *Boxes) Box(s string) any {
	t := &b.table[slot(s)]
	if v := t.Load(); v != nil && v.(string) == s {
		return v
	}
	v := any(s)
	t.Store(v)
	return v
}
