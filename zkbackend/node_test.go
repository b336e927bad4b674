package zkbackend

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

func TestDataRoundTrip(t *testing.T) {
	for _, d := range []lockData{
		{owner: "o", holds: []string{""}},
		{owner: "", holds: []string{"a", "b"}},
		{owner: "with\nnewline and \x00 NUL", holds: []string{"", "x\xff", string(make([]byte, 300))}},
	} {
		got, err := decodeData(d.encode())
		if err != nil || got.owner != d.owner || !slices.Equal(got.holds, d.holds) {
			t.Errorf("round trip of %+v: %+v, %v", d, got, err)
		}
	}
	for _, raw := range [][]byte{nil, {}, {2, 0, 0}, {1}, {1, 5, 'a'}, {1, 1, 'o'}, {1, 1, 'o', 9}} {
		if _, err := decodeData(raw); err == nil {
			t.Errorf("decodeData(%q) accepted foreign data", raw)
		}
	}
}

func TestDataHolds(t *testing.T) {
	d := lockData{owner: "o", holds: []string{"a"}}
	e := d.with("b", 1)
	if d.count() != 1 || e.count() != 2 || !e.has("b") || d.has("b") {
		t.Fatalf("with changed its receiver or lost the hold: %+v %+v", d, e)
	}
	if f := e.without("a"); f.count() != 1 || f.has("a") || !e.has("a") {
		t.Fatalf("without: %+v from %+v", f, e)
	}
}

func TestLineUp(t *testing.T) {
	g1, g2 := newGUID(), newGUID()
	children := []string{
		nodeStem(g1) + "0000000012",
		"lock-0000000001", // zk.Lock's node, or anything else: not in line
		nodeStem(g2) + "0000000003",
		"_c_" + "zz" + g1[2:] + "-lock-0000000001", // not hex
		nodeStem(g1) + "00000x0001",
		"1",
		firstNodeName(g2),
	}
	q := lineUp(children, false)
	var names []string
	for _, e := range q {
		names = append(names, e.name)
	}
	want := []string{firstNodeName(g2), nodeStem(g2) + "0000000003", nodeStem(g1) + "0000000012"}
	if !slices.Equal(names, want) {
		t.Fatalf("line %v, want %v", names, want)
	}
	if e, ok := findGUID(q, g1); !ok || e.seq != 12 {
		t.Fatalf("findGUID: %+v %v", e, ok)
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"order:10086", "a.b", "...", "ünïcode", "zookeeper", "_c_x"} {
		if err := checkName(name); err != nil {
			t.Errorf("%q refused: %v", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "a/b", "/a", "a/", "nul\x00", "tab\t", "del\x7f", "c1\u0085", "\ud7ff\uf000", "bad\xffutf8", "\ufff5"} {
		if err := checkName(name); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%q accepted: %v", name, err)
		}
	}
}

func TestCheckRoot(t *testing.T) {
	for _, root := range []string{"/fencelock", "/a/b/c", "/zookeeper2"} {
		if err := checkRoot(root); err != nil {
			t.Errorf("%q refused: %v", root, err)
		}
	}
	for _, root := range []string{"", "/", "fencelock", "/a/", "/a//b", "/a/./b", "/a/../b", "/zookeeper", "/zookeeper/x", "/a\x00"} {
		if err := checkRoot(root); !errors.Is(err, fencelock.ErrInvalid) {
			t.Errorf("%q accepted: %v", root, err)
		}
	}
}

func TestPermitData(t *testing.T) {
	d := lockData{owner: "o", meta: "m", holds: []string{"w"}, limit: 5, weights: []int{4}}
	d = d.with("r", 1)
	got, err := decodeData(d.encode())
	if err != nil || got.limit != 5 || !slices.Equal(got.holds, []string{"w", "r"}) || !slices.Equal(got.weights, []int{4, 1}) || got.weight() != 4 {
		t.Fatalf("round trip of %+v: %+v, %v", d, got, err)
	}
	if e := got.without("w"); e.weight() != 1 || !slices.Equal(e.weights, []int{1}) || got.weight() != 4 {
		t.Fatalf("releasing the largest hold of %+v left %+v", got, e)
	}
	// A weight above the limit, a zero limit or weight, and a cut-off hold are not fencelock's.
	for _, raw := range [][]byte{{3, 1, 'o', 0, 2, 3, 0}, {3, 1, 'o', 0, 0, 1, 0}, {3, 1, 'o', 0, 2, 0, 0}, {3, 1, 'o', 0, 2, 1, 4, 'a'}, {4, 1, 'o', 0}} {
		if _, err := decodeData(raw); err == nil {
			t.Errorf("decodeData(%v) accepted foreign data", raw)
		}
	}
}

func TestPermitNames(t *testing.T) {
	g := newGUID()
	req := driver.Request{Name: "pool", Owner: "me", Limit: 3, Weight: 2}
	name := permitStem(g, req) + "0000000007"
	e, ok := parseEntry(name)
	if !ok || !e.permit() || e.guid != g || e.limit != 3 || e.weight != 2 || e.seq != 7 || e.tag != ownerTag("me") {
		t.Fatalf("parseEntry(%q) = %+v, %v", name, e, ok)
	}
	bad := permitStem(g, driver.Request{Limit: 3, Weight: 2})
	for _, n := range []string{
		bad[:len(bad)-1] + "0000000001",                          // no separator before the sequence
		strings.Replace(bad, "-3-2-", "-2-3-", 1) + "0000000001", // weight above the limit
		strings.Replace(bad, "-3-2-", "-0-0-", 1) + "0000000001",
		strings.Replace(bad, "-3-2-", "-3-2-9-", 1) + "0000000001",
		"_p_" + g + "-zz" + ownerTag("")[2:] + "-3-2-0000000001",
	} {
		if e, ok := parseEntry(n); ok {
			t.Errorf("parseEntry(%q) = %+v, want not in line", n, e)
		}
	}
	children := []string{name, nodeStem(g) + "0000000001", permitStem(newGUID(), req) + "0000000002"}
	if locks, permits := lineUp(children, false), lineUp(children, true); len(locks) != 1 || len(permits) != 2 || permits[0].seq != 2 {
		t.Fatalf("a lock and a semaphore of one name: locks %+v, permits %+v", locks, permits)
	}
}
