package zkbackend

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

var _ driver.Semaphores = (*Backend)(nil)

// A semaphore of limit L is a line as a lock's is, in the same directory <root>/<name>: each
// holder and waiter has an ephemeral sequential permit node (see permitStem), and a node holds
// its permits when they and those of every node before it fit in L, so that no node passes one
// that came before it. Once a node holds, it holds until it goes: nodes join only at the end of
// the line, and a node's weight never grows. A node's czxid is its permit's fencing token.
//
// The limit is the first node's: it holds its permits, and every node that holds after it
// agreed with it. An acquisition of another limit fails with a *driver.LimitError and
// leaves; its node, until it has gone, is refused: it holds nothing, waits for nothing and
// sets no limit. Nodes read the line after they joined, so of two that disagree the younger
// one always sees the older one, and leaves. A refused node may stay a while: its delete can
// be lost with the connection, and is owed. No node is granted while a refused node stands
// before it: it removes those first (see dropRefused), so that once the nodes ahead of a
// refused node are gone, it can never stand first and name the limit of the holders behind it.

// checkPermit says why req cannot ask for a permit.
func checkPermit(req driver.Request) error {
	switch {
	case req.Limit > math.MaxInt32:
		return fmt.Errorf("%w: semaphore %q: limit %d: want at most %d", driver.ErrInvalid, req.Name, req.Limit, math.MaxInt32)
	case req.Weight < 0 || req.Weight > req.Limit:
		return fmt.Errorf("%w: semaphore %q: weight %d: want 1 to the limit, %d", driver.ErrInvalid, req.Name, req.Weight, req.Limit)
	}
	return nil
}

// attemptPermit is attempt for a permit of the semaphore req.Name.
func (b *Backend) attemptPermit(ctx context.Context, start time.Time, req driver.Request, guid string, queued bool, left []owed) (driver.Grant, holding, error) {
	if err := checkPermit(req); err != nil {
		return driver.Grant{}, holding{}, err
	}
	k := keyOf(req.Name, req.Owner, req.Limit)
	dir := b.Path(req.Name)
	for range lookTries {
		if g, h, err := b.enterHeld(ctx, start, k, req); err != errVanished {
			return g, h, err
		}
		if !queued {
			// Look before joining, as for a lock: all permits held then cost a read.
			q, err := b.permits(ctx, dir, false)
			if err != nil {
				return driver.Grant{}, holding{}, err
			}
			if err := agree(req, q); err != nil {
				return driver.Grant{}, holding{}, err
			}
			h, ok, err := b.ownPermit(ctx, dir, q, req.Owner, "")
			switch {
			case err != nil:
				return driver.Grant{}, holding{}, err
			case ok:
				g, h, err := b.enter(ctx, start, k, h, req, true)
				if err == errVanished {
					continue
				}
				return g, h, err
			}
			fit, _, err := b.fits(ctx, dir, append(q, entry{limit: req.Limit, weight: max(req.Weight, 1)}), len(q), false)
			if err != nil {
				return driver.Grant{}, holding{}, err
			}
			if !fit {
				return driver.Grant{}, holding{}, &driver.HeldError{Name: req.Name, Limit: req.Limit}
			}
		}
		n, err := b.join(ctx, req, guid, left)
		if err != nil {
			return driver.Grant{}, holding{}, err
		}
		return b.await(ctx, start, req, n, &permitLine{b: b, req: req, n: n, queued: queued})
	}
	return driver.Grant{}, holding{}, fmt.Errorf("%w: %q changed hands %d times while being acquired", driver.ErrUnavailable, req.Name, lookTries)
}

// agree says whether req's limit is the semaphore's: that of the first node in q, if any.
func agree(req driver.Request, q []entry) error {
	if len(q) > 0 && q[0].limit != req.Limit {
		return &driver.LimitError{Name: req.Name, Limit: req.Limit, Stored: q[0].limit}
	}
	return nil
}

// refusedBefore returns the refused nodes before q[i]: those whose limit is not the first
// node's.
func refusedBefore(q []entry, i int) []entry {
	var out []entry
	for _, e := range q[:i] {
		if e.limit != q[0].limit {
			out = append(out, e)
		}
	}
	return out
}

// dropRefused deletes the refused nodes r of the line of dir, whose first node is head. It
// deletes them only while head is still there, the proof that they are refused: a node that
// disagrees with a node older than it saw that node at every look, and never held; with head
// gone, one of them could be first, and hold. (Deleting a node takes the right to delete in
// the directory, which a caller needs for its own node anyway.) errVanished says the line
// changed meanwhile: read it again.
func (b *Backend) dropRefused(ctx context.Context, dir string, head entry, r []entry) error {
	ops := []any{&zk.CheckVersionRequest{Path: dir + "/" + head.name, Version: -1}}
	for _, e := range r {
		ops = append(ops, &zk.DeleteRequest{Path: dir + "/" + e.name, Version: -1})
	}
	switch _, err := b.multi(ctx, ops...); err {
	case nil:
		return nil
	case zk.ErrNoNode:
		return errVanished
	default:
		return classify(err)
	}
}

// permitLine is a semaphore's line to a waiter in it, n: n holds its permits once they and
// those of every node before it fit in the limit. Queued, it waits for that, watching the line
// and the nodes ahead that may give permits back; not queued, it leaves when they do not fit.
type permitLine struct {
	b       *Backend
	req     driver.Request
	n       *node
	queued  bool
	changed <-chan zk.Event   // the line's watch, from the last list
	gave    []<-chan zk.Event // the watches on nodes ahead that may give permits back, from look
}

func (l *permitLine) list(ctx context.Context, dir string) ([]entry, error) {
	q, changed, err := l.b.permitsW(ctx, dir, l.queued)
	l.changed = changed
	return q, err
}

func (l *permitLine) gone(q []entry) error {
	if err := agree(l.req, q); err != nil {
		return err // removed as refused by a node behind it
	}
	return fmt.Errorf("%w: the permit node %s vanished while in line: its session expired, or someone deleted it", driver.ErrUnavailable, l.n.path)
}

func (l *permitLine) left(err error) error {
	return fmt.Errorf("fencelock/zk: left the line of semaphore %q: %w", l.req.Name, err)
}

// look reads what it must of the nodes ahead of n to say whether n holds: a node ahead that
// took more than one permit may have given some back. The request is told it waits only once
// they do not fit, and n's owner holds no permit ahead of it to enter.
func (l *permitLine) look(ctx context.Context, q []entry, i int) (step, error) {
	dir := parent(l.n.path)
	if err := agree(l.req, q[:i]); err != nil {
		return step{}, err
	}
	if r := refusedBefore(q, i); len(r) > 0 {
		// Removed, or gone meanwhile: read the line again, for a grant that rests on a line
		// without them.
		if err := l.b.dropRefused(ctx, dir, q[0], r); err != nil && err != errVanished {
			return step{}, err
		}
		return step{next: stepAgain}, nil
	}
	// The owner may hold a permit through another node ahead, since n joined too: another
	// call of the owner's, waiting before n, was granted. Enter that one rather than wait
	// behind itself; n is surplus either way. What grants that node — a node before it
	// leaving, or giving permits back — changes the line or a node n watches, and wakes n.
	h, ok, err := l.b.ownPermit(ctx, dir, q[:i], l.req.Owner, "")
	switch {
	case err != nil:
		return step{}, err
	case ok:
		return step{next: stepEnter, owner: h}, nil
	}
	fit, gave, err := l.b.fits(ctx, dir, q, i, l.queued)
	switch {
	case err != nil:
		return step{}, err
	case fit:
		return step{next: stepHold}, nil
	case !l.queued:
		return step{next: stepRefuse}, nil
	}
	l.gave = gave
	return step{next: stepWait}, nil
}

// wait waits for a change in line, or for permits given back ahead of n.
func (l *permitLine) wait(ctx context.Context, _ []entry, _ int) (step, error) {
	if err := waitAny(ctx, l.req.Name, append(l.gave, l.changed)); err != nil {
		if err == errSessionGone {
			return step{}, fmt.Errorf("%w: waiting for a permit of %q: %w", driver.ErrUnavailable, l.req.Name, err)
		}
		return step{}, err
	}
	return step{next: stepAgain}, nil
}

// fits says whether the permits of q[i] and of every node before it fit in the limit, which
// q[i]'s must be; refused nodes take none. A node's weight is in its name, as its first hold
// asked; a node ahead that took more than one permit may have given some back since (a write
// lock released under a read lock), so when the names say no, fits reads those nodes — with a
// watch on each, when watch is set, returned with the answer.
func (b *Backend) fits(ctx context.Context, dir string, q []entry, i int, watch bool) (bool, []<-chan zk.Event, error) {
	limit := q[i].limit
	if q[0].limit != limit {
		return false, nil, &driver.LimitError{Name: dir[len(parent(dir))+1:], Limit: limit, Stored: q[0].limit}
	}
	used := 0
	var weighted []entry
	for j, e := range q[:i+1] {
		if e.limit != limit {
			continue // refused
		}
		used += e.weight
		if j < i && e.weight > 1 {
			weighted = append(weighted, e)
		}
	}
	if used <= limit || len(weighted) == 0 {
		return used <= limit, nil, nil
	}
	var watches []<-chan zk.Event
	for _, e := range weighted {
		path := dir + "/" + e.name
		var raw []byte
		var w <-chan zk.Event
		var err error
		if watch {
			raw, _, w, err = b.getW(ctx, path)
		} else {
			raw, _, err = b.get(ctx, path)
		}
		switch {
		case err == zk.ErrNoNode:
			used -= e.weight // gone since the list was read: the list's watch says so
			continue
		case err != nil:
			return false, nil, classify(err)
		}
		d, err := decodeData(raw)
		if err != nil {
			return false, nil, fmt.Errorf("%w: %s: %w", driver.ErrInvalid, path, err)
		}
		used -= e.weight - d.weight()
		if w != nil {
			watches = append(watches, w)
		}
	}
	return used <= limit, watches, nil
}

// ownPermit returns owner's node in q, read now, when it holds its permits: the one with hold
// in it, or with hold empty, one of a session this Backend can vouch for. The same owner may
// hold a permit through another process's session too (see sessions.go), whose node is not
// this one's to enter, renew or release.
//
// Whether a node holds, the line tells (fits), before any read: a waiter asks at every wake,
// and a node of its owner's that waits too costs it nothing. A node that held when q was read
// holds as long as it is there, so the read after says it still does.
func (b *Backend) ownPermit(ctx context.Context, dir string, q []entry, owner, hold string) (holding, bool, error) {
	tag := ownerTag(owner)
	for j, e := range q {
		if e.tag != tag || e.limit != q[0].limit { // another's, or refused
			continue
		}
		fit, _, err := b.fits(ctx, dir, q, j, false)
		if err != nil || !fit {
			return holding{}, false, err // and none after it holds either
		}
		path := dir + "/" + e.name
		sent := time.Now()
		data, stat, err := b.read(ctx, path)
		switch {
		case err == errVanished:
			continue
		case err != nil:
			return holding{}, false, err
		case data.owner != owner:
			continue // another owner whose tag is the same
		case hold != "" && !data.has(hold), hold == "" && !b.vouchable(stat.EphemeralOwner):
			continue
		}
		return holdingOf(path, data, stat, sent), true, nil
	}
	return holding{}, false, nil
}

// permits lists the permit nodes in dir, first in line first; a missing dir is an empty line.
func (b *Backend) permits(ctx context.Context, dir string, watch bool) ([]entry, error) {
	q, _, err := b.permitsW(ctx, dir, watch)
	return q, err
}

// permitsW is permits with, when watch is set, a watch on the line.
func (b *Backend) permitsW(ctx context.Context, dir string, watch bool) ([]entry, <-chan zk.Event, error) {
	var children []string
	var changed <-chan zk.Event
	var err error
	if watch {
		children, changed, err = b.childrenW(ctx, dir)
	} else {
		children, err = b.children(ctx, dir)
	}
	switch {
	case err == zk.ErrNoNode:
		return nil, nil, nil
	case err != nil:
		return nil, nil, classify(err)
	}
	return lineUp(children, true), changed, nil
}

// waitAny waits for an event on one of watches, or for ctx to end. It returns errSessionGone
// when go-zookeeper ended a watch with the session.
func waitAny(ctx context.Context, name string, watches []<-chan zk.Event) error {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
	for _, w := range watches {
		if w != nil {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
		}
	}
	i, v, _ := reflect.Select(cases)
	if i == 0 {
		// The watches stay registered until what they watch changes (see waitTurn).
		return fmt.Errorf("fencelock/zk: left the line of semaphore %q: %w", name, ctx.Err())
	}
	if ev, ok := v.Interface().(zk.Event); ok && ev.Err != nil {
		return errSessionGone
	}
	return nil
}

// permitOf returns k's permit node, when its owner holds one: the one with hold in it, or
// with hold empty, one this Backend can vouch for (see ownPermit).
func (b *Backend) permitOf(ctx context.Context, k holder, hold string) (holding, error) {
	dir := b.Path(k.name)
	q, err := b.permits(ctx, dir, false)
	if err != nil {
		return holding{}, err
	}
	h, ok, err := b.ownPermit(ctx, dir, q, k.owner, hold)
	switch {
	case err != nil:
		return holding{}, err
	case !ok:
		return holding{}, fmt.Errorf("%w: this owner holds no permit of %q in ZooKeeper", driver.ErrNotHeld, k.name)
	}
	return h, nil
}

// InspectSemaphore implements driver.Semaphores. A permit's Remaining is zero, as a lock's
// is (see Inspect); Token is the newest permit's.
func (b *Backend) InspectSemaphore(ctx context.Context, name string) (driver.SemaphoreInfo, error) {
	info := driver.SemaphoreInfo{Name: name}
	if err := b.usable(ctx, name); err != nil {
		return info, err
	}
	dir := b.Path(name)
look:
	for range lookTries {
		q, err := b.permits(ctx, dir, false)
		if err != nil || len(q) == 0 {
			return info, err
		}
		info = driver.SemaphoreInfo{Name: name, Limit: q[0].limit}
		q = slices.DeleteFunc(q, func(e entry) bool { return e.limit != info.Limit }) // refused
		for i, e := range q {
			data, stat, err := b.read(ctx, dir+"/"+e.name)
			switch {
			case err == errVanished:
				continue look // released meanwhile: look again
			case err != nil:
				return info, err
			}
			if info.InUse+data.weight() > info.Limit {
				// This one waits, and so does every later one: none passes one before it.
				info.Waiting = len(q) - i
				break
			}
			info.InUse += data.weight()
			info.Token = max(info.Token, stat.Czxid)
			info.Permits = append(info.Permits, driver.Info{Name: name, Held: true, Owner: data.owner, Count: data.count(),
				Token: stat.Czxid, Meta: data.meta, Weight: data.weight()})
		}
		return info, nil
	}
	return info, fmt.Errorf("%w: %q changed hands %d times while being inspected", driver.ErrUnavailable, name, lookTries)
}

// SemaphoreNames implements driver.SemaphoreNamer: the names under the root, which hold
// locks, semaphores or both; ListSemaphores asks InspectSemaphore about each.
func (b *Backend) SemaphoreNames(ctx context.Context, prefix string) ([]string, error) {
	return b.Names(ctx, prefix)
}
