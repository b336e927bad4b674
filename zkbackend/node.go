package zkbackend

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fencelock/fencelock/driver"
)

// lockData is what a lock or permit node stores: the owner and the IDs of the owner's holds.
// The hold count is the number of hold IDs, so a retried acquire (a hold ID already present)
// cannot count twice, and a retried release (a hold ID already gone) cannot decrement twice.
// A permit node also keeps its semaphore's limit and how many permits each hold takes.
//
// Encoding, compact and self-delimiting so that any owner, metadata or hold string survives it:
//
//	byte 0      format version: 2 for a lock (1: the same without the metadata), 3 for a permit
//	uvarint n   length of the owner ID, then its n bytes
//	uvarint n   length of the metadata the holder published, then its n bytes
//	uvarint     a permit's limit (format 3 only)
//	repeated    per hold, in order: a permit's uvarint weight (format 3 only), then uvarint n
//	            and n bytes, the hold ID (possibly empty)
type lockData struct {
	owner   string
	meta    string
	holds   []string
	limit   int   // a permit's semaphore's; 0 for a lock
	weights []int // a permit's, one per hold; nil for a lock
}

const (
	dataFormat   = 2
	permitFormat = 3
)

var errForeignData = errors.New("the lock node holds data fencelock did not write")

func (d lockData) count() int { return len(d.holds) }

func (d lockData) has(hold string) bool { return slices.Contains(d.holds, hold) }

// with returns d plus hold, which takes weight permits of a permit node; d itself is left as it
// was, since a failed compare-and-set must be able to start again from a fresh read.
func (d lockData) with(hold string, weight int) lockData {
	e := d
	e.holds = append(slices.Clip(d.holds), hold)
	if d.limit > 0 {
		e.weights = append(slices.Clip(d.weights), max(weight, 1))
	}
	return e
}

func (d lockData) without(hold string) lockData {
	e := d
	e.holds, e.weights = make([]string, 0, len(d.holds)), nil
	for i, h := range d.holds {
		if h == hold {
			continue
		}
		e.holds = append(e.holds, h)
		if d.limit > 0 {
			e.weights = append(e.weights, d.weights[i])
		}
	}
	return e
}

// weight is how many permits a permit node takes: the most any of its holds asked for, so
// that releasing the largest gives the difference back. A lock node's is 1.
func (d lockData) weight() int {
	w := 1
	for _, k := range d.weights {
		w = max(w, k)
	}
	return w
}

func (d lockData) encode() []byte {
	n := 1 + 3*binary.MaxVarintLen64 + len(d.owner) + len(d.meta)
	for _, h := range d.holds {
		n += 2*binary.MaxVarintLen64 + len(h)
	}
	b := make([]byte, 1, n)
	b[0] = dataFormat
	if d.limit > 0 {
		b[0] = permitFormat
	}
	b = binary.AppendUvarint(b, uint64(len(d.owner)))
	b = append(b, d.owner...)
	b = binary.AppendUvarint(b, uint64(len(d.meta)))
	b = append(b, d.meta...)
	if d.limit > 0 {
		b = binary.AppendUvarint(b, uint64(d.limit))
	}
	for i, h := range d.holds {
		if d.limit > 0 {
			b = binary.AppendUvarint(b, uint64(d.weights[i]))
		}
		b = binary.AppendUvarint(b, uint64(len(h)))
		b = append(b, h...)
	}
	return b
}

func decodeData(b []byte) (lockData, error) {
	if len(b) == 0 || b[0] < 1 || b[0] > permitFormat {
		return lockData{}, errForeignData
	}
	format := b[0]
	b = b[1:]
	number := func() (int, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n < 1 || n > math.MaxInt32 {
			return 0, false
		}
		b = b[k:]
		return int(n), true
	}
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
	if format == permitFormat {
		if d.limit, ok = number(); !ok {
			return lockData{}, errForeignData
		}
	}
	for len(b) > 0 {
		if format == permitFormat {
			w, ok := number()
			if !ok || w > d.limit {
				return lockData{}, errForeignData
			}
			d.weights = append(d.weights, w)
		}
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

// newGUIDFor returns a GUID for a node of owner's: 64 random bits, then the first 64 bits of
// the owner's tag, so that a waiter tells from the name of the node first in line whether it
// may be its owner's, without reading it (see ahead). A GUID made by a client before December
// 2026 is random throughout: its node is read, as before.
func newGUIDFor(owner string) string {
	return newGUID()[:guidLen/2] + ownerTag(owner)[:guidLen/2]
}

// mayBeOwners reports whether the node of entry e may be owner's: its GUID ends with the
// owner's tag (see newGUIDFor).
func (e entry) mayBeOwners(owner string) bool {
	return e.guid[guidLen/2:] == ownerTag(owner)[:guidLen/2]
}

// nodeStem is the name given to a sequential create, which ZooKeeper completes with the
// sequence number.
func nodeStem(guid string) string { return nodePrefix + guid + nodeMarker }

// firstNodeName is the name of the node that creates the lock's directory in the same
// transaction. The directory is new, so its sequence counter is 0 and every sequential node
// created in it later gets a greater number: naming this one 0 puts it first in line, as a
// sequential create would have.
func firstNodeName(guid string) string { return nodeStem(guid) + firstSequence }

const firstSequence = "0000000000"

// A permit node is named _p_<guid>-<tag>-<limit>-<weight>-<sequence>: the semaphore's limit
// and the permits the node's first hold takes (which its weight never exceeds) are in the name,
// so that the list of a semaphore's children tells who holds and who waits, and whether they
// agree on the limit, without reading each node; tag, 16 hex digits of a hash of the owner,
// finds the owner's node among them, read to be sure.
const (
	permitPrefix = "_p_"
	tagLen       = 16
)

// permitStem is nodeStem for a permit node of req.
func permitStem(guid string, req driver.Request) string {
	return permitPrefix + guid + "-" + ownerTag(req.Owner) + "-" + strconv.Itoa(req.Limit) + "-" + strconv.Itoa(max(req.Weight, 1)) + "-"
}

// ownerTag is the owner's tag in the name of its permit nodes.
func ownerTag(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:tagLen/2])
}

// entry is one node in a lock's queue, or in a semaphore's.
type entry struct {
	name string
	guid string
	seq  int64
	// A permit node's: its semaphore's limit, the permits its first hold took, its owner's tag.
	limit, weight int
	tag           string
}

// parseEntry reads a lock or permit node name. Other children of a directory (written by hand,
// or by another recipe) are in no queue.
func parseEntry(name string) (entry, bool) {
	if strings.HasPrefix(name, permitPrefix) {
		return parsePermit(name)
	}
	if len(name) <= seqOffset || !strings.HasPrefix(name, nodePrefix) || name[seqOffset-len(nodeMarker):seqOffset] != nodeMarker {
		return entry{}, false
	}
	guid := name[len(nodePrefix) : len(nodePrefix)+guidLen]
	seq, ok := digits(name[seqOffset:])
	if !isHex(guid) || !ok {
		return entry{}, false
	}
	return entry{name: name, guid: guid, seq: seq}, true
}

func parsePermit(name string) (entry, bool) {
	rest := name[len(permitPrefix):]
	if len(rest) < guidLen+1+tagLen+1 || rest[guidLen] != '-' || rest[guidLen+1+tagLen] != '-' {
		return entry{}, false
	}
	guid, tag := rest[:guidLen], rest[guidLen+1:guidLen+1+tagLen]
	f := strings.Split(rest[guidLen+1+tagLen+1:], "-")
	if len(f) != 3 || !isHex(guid) || !isHex(tag) {
		return entry{}, false
	}
	limit, ok1 := digits(f[0])
	weight, ok2 := digits(f[1])
	seq, ok3 := digits(f[2])
	if !ok1 || !ok2 || !ok3 || limit < 1 || weight < 1 || weight > limit || limit > math.MaxInt32 {
		return entry{}, false
	}
	return entry{name: name, guid: guid, seq: seq, limit: int(limit), weight: int(weight), tag: tag}, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// digits reads a decimal number of up to 18 digits.
func digits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func (e entry) permit() bool { return e.limit > 0 }

// lineUp returns the lock nodes among children, or the permit nodes, first in line first.
func lineUp(children []string, permits bool) []entry {
	q := make([]entry, 0, len(children))
	for _, c := range children {
		if e, ok := parseEntry(c); ok && e.permit() == permits {
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
