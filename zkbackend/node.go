package zkbackend

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// lockData is what a lock node stores: the owner and the IDs of the owner's holds. The hold
// count is the number of hold IDs, so a retried acquire (a hold ID already present) cannot
// count twice, and a retried release (a hold ID already gone) cannot decrement twice.
//
// Encoding, compact and self-delimiting so that any owner, metadata or hold string survives it:
//
//	byte 0      format version, 2 (1: the same without the metadata)
//	uvarint n   length of the owner ID, then its n bytes
//	uvarint n   length of the metadata the holder published, then its n bytes
//	repeated    uvarint n, then n bytes: one hold ID (possibly empty) per hold, in order
type lockData struct {
	owner string
	meta  string
	holds []string
}

const dataFormat = 2

var errForeignData = errors.New("the lock node holds data fencelock did not write")

func (d lockData) count() int { return len(d.holds) }

func (d lockData) has(hold string) bool { return slices.Contains(d.holds, hold) }

// with returns d plus hold; d itself is left as it was, since a failed compare-and-set must be
// able to start again from a fresh read.
func (d lockData) with(hold string) lockData {
	return lockData{owner: d.owner, meta: d.meta, holds: append(slices.Clip(d.holds), hold)}
}

func (d lockData) without(hold string) lockData {
	holds := make([]string, 0, len(d.holds))
	for _, h := range d.holds {
		if h != hold {
			holds = append(holds, h)
		}
	}
	return lockData{owner: d.owner, meta: d.meta, holds: holds}
}

func (d lockData) encode() []byte {
	n := 1 + 2*binary.MaxVarintLen64 + len(d.owner) + len(d.meta)
	for _, h := range d.holds {
		n += binary.MaxVarintLen64 + len(h)
	}
	b := make([]byte, 1, n)
	b[0] = dataFormat
	b = binary.AppendUvarint(b, uint64(len(d.owner)))
	b = append(b, d.owner...)
	b = binary.AppendUvarint(b, uint64(len(d.meta)))
	b = append(b, d.meta...)
	for _, h := range d.holds {
		b = binary.AppendUvarint(b, uint64(len(h)))
		b = append(b, h...)
	}
	return b
}

func decodeData(b []byte) (lockData, error) {
	if len(b) == 0 || (b[0] != dataFormat && b[0] != 1) {
		return lockData{}, errForeignData
	}
	format := b[0]
	b = b[1:]
	next := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	owner, ok := next()
	if !ok {
		return lockData{}, errForeignData
	}
	d := lockData{owner: owner}
	if format >= 2 {
		if d.meta, ok = next(); !ok {
			return lockData{}, errForeignData
		}
	}
	for len(b) > 0 {
		h, ok := next()
		if !ok {
			return lockData{}, errForeignData
		}
		d.holds = append(d.holds, h)
	}
	if len(d.holds) == 0 {
		return lockData{}, errForeignData
	}
	return d, nil
}

// A lock node is named _c_<guid>-lock-<sequence>. The GUID, fresh per acquisition, is
// Curator's protection mode: when a create's reply is lost with the connection, the node it may
// have made is found again by its GUID instead of being left behind in the queue. The sequence
// is the ten-digit counter ZooKeeper appends.
const (
	nodePrefix = "_c_"
	nodeMarker = "-lock-"
	guidLen    = 32
	seqOffset  = len(nodePrefix) + guidLen + len(nodeMarker)
)

// newGUID returns 128 random bits in hex.
func newGUID() string {
	var b [guidLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// nodeStem is the name given to a sequential create, which ZooKeeper completes with the
// sequence number.
func nodeStem(guid string) string { return nodePrefix + guid + nodeMarker }

// firstNodeName is the name of the node that creates the lock's directory in the same
// transaction. The directory is new, so its sequence counter is 0 and every sequential node
// created in it later gets a greater number: naming this one 0 puts it first in line, as a
// sequential create would have.
func firstNodeName(guid string) string { return nodeStem(guid) + "0000000000" }

// entry is one node in a lock's queue.
type entry struct {
	name string
	guid string
	seq  int64
}

// parseEntry reads a lock node name. Other children of a lock's directory (written by hand,
// or by another recipe) are not in the queue.
func parseEntry(name string) (entry, bool) {
	if len(name) <= seqOffset || !strings.HasPrefix(name, nodePrefix) || name[seqOffset-len(nodeMarker):seqOffset] != nodeMarker {
		return entry{}, false
	}
	guid := name[len(nodePrefix) : len(nodePrefix)+guidLen]
	for i := 0; i < len(guid); i++ {
		if c := guid[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return entry{}, false
		}
	}
	digits := name[seqOffset:]
	for i := 0; i < len(digits); i++ {
		if c := digits[i]; c < '0' || c > '9' {
			return entry{}, false
		}
	}
	seq, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return entry{}, false
	}
	return entry{name: name, guid: guid, seq: seq}, true
}

// lineUp returns the lock nodes among children, first in line first.
func lineUp(children []string) []entry {
	q := make([]entry, 0, len(children))
	for _, c := range children {
		if e, ok := parseEntry(c); ok {
			q = append(q, e)
		}
	}
	slices.SortFunc(q, func(a, b entry) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return q
}

func position(q []entry, name string) int {
	return slices.IndexFunc(q, func(e entry) bool { return e.name == name })
}

func findGUID(q []entry, guid string) (entry, bool) {
	i := slices.IndexFunc(q, func(e entry) bool { return e.guid == guid })
	if i < 0 {
		return entry{}, false
	}
	return q[i], true
}
