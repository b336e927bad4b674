package recent

import (
	"strconv"
	"sync"
	"testing"
)

type named struct{ name, v string }

func (n *named) Key() string { return n.name }

func TestGetReturnsWhatWasPut(t *testing.T) {
	var c Cache[*named]
	if _, ok := c.Get("a"); ok {
		t.Fatal("an empty cache had a")
	}
	c.Put(&named{"a", "1"})
	if p, ok := c.Get("a"); !ok || p.v != "1" {
		t.Fatalf("Get(a) = %v, %v, want 1, true", p, ok)
	}
	c.Put(&named{"a", "2"})
	if p, ok := c.Get("a"); !ok || p.v != "2" {
		t.Fatalf("Get(a) after a second Put = %v, %v, want 2, true", p, ok)
	}
}

// More strings than slots: a string is either found with its own value or not found, never
// found with another string's.
func TestCollisionsNeverMixValues(t *testing.T) {
	var c Cache[*named]
	var b Boxes
	const n = 4 * slots
	for i := range n {
		k := strconv.Itoa(i)
		c.Put(&named{k, k})
		b.Box(k)
	}
	found := 0
	for i := range n {
		k := strconv.Itoa(i)
		if p, ok := c.Get(k); ok {
			found++
			if p.v != k {
				t.Fatalf("Get(%s) = %s", k, p.v)
			}
		}
		if v := b.Box(k); v.(string) != k {
			t.Fatalf("Box(%s) = %v", k, v)
		}
	}
	if found == 0 || found > slots {
		t.Fatalf("%d of %d strings found in %d slots", found, n, slots)
	}
}

func TestConcurrentUse(t *testing.T) {
	var c Cache[*named]
	var b Boxes
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				k := strconv.Itoa((i * (g + 1)) % 700)
				if p, ok := c.Get(k); ok && p.v != k {
					t.Errorf("Get(%s) = %s", k, p.v)
					return
				}
				c.Put(&named{k, k})
				if v := b.Box(k); v.(string) != k {
					t.Errorf("Box(%s) = %v", k, v)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A hit allocates nothing; a miss of Box allocates what boxing allocates, no more.
func TestAllocations(t *testing.T) {
	var c Cache[*named]
	var b Boxes
	key := "lock:{a}"
	c.Put(&named{key, "x"})
	if n := testing.AllocsPerRun(100, func() { _, _ = c.Get(key) }); n != 0 {
		t.Errorf("Get allocated %v times", n)
	}
	b.Box(key)
	if n := testing.AllocsPerRun(100, func() { _ = b.Box(key) }); n != 0 {
		t.Errorf("Box of a boxed string allocated %v times", n)
	}
	i := 0
	if n := testing.AllocsPerRun(100, func() { i++; _ = b.Box(key[:1+i%7]) }); n > 1 {
		t.Errorf("Box of a string not kept allocated %v times, want at most 1", n)
	}
}
