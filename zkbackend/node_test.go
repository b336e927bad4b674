package zkbackend

import (
	"errors"
	"slices"
	"testing"

	"github.com/fencelock/fencelock"
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
	e := d.with("b")
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
	q := lineUp(children)
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
