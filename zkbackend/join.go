package zkbackend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
)

// node is the lock node one acquisition made: its place in line.
type node struct {
	path    string
	name    string
	session int64  // the session it was made under
	hold    string // the hold it was made for
	data    lockData
	version int32
	stat    *zk.Stat  // known when the create returned it, else nil
	first   bool      // made together with the lock's directory, so first in line
	crowded bool      // others were in line behind it when last read
	sent    time.Time // the send of the create that made it
}

// createBackoff spaces the attempts of join after a connection loss. go-zookeeper fails the
// requests sent while it reconnects, and, with a single server, waits a second before it dials
// again; the attempts must outlast that.
var createBackoff = [...]time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}

// join puts a lock node for req in line, or takes back the place of one that an earlier
// attempt of the same hold left there (left). When a create fails with the connection, its
// node may exist all the same: join then looks for it by guid before creating again (Curator's
// protection mode), and when it cannot tell, owes its removal rather than leave it in line.
func (b *Backend) join(ctx context.Context, req driver.Request, guid string, left []owed) (*node, error) {
	dir := b.Path(req.Name)
	data := lockData{owner: req.Owner, meta: req.Meta, holds: []string{req.Hold}}
	stem := nodeStem(guid)
	if req.Limit > 0 {
		data.limit, data.weights = req.Limit, []int{max(req.Weight, 1)}
		stem = permitStem(guid, req)
	}
	o := owed{holder: keyOf(req.Name, req.Owner, req.Limit), hold: req.Hold, guid: guid}
	look := len(left) > 0       // for a node left in line
	unsure := false             // a create of o's may have made its node
	var pending <-chan struct{} // that create, when its answer is still to come
	var err error
	for _, pause := range createBackoff {
		if pause > 0 {
			if err = sleep(ctx, pause); err != nil {
				break
			}
		}
		if look {
			var n *node
			if n, err = b.recover(ctx, dir, req, slices.Concat(left, []owed{o})); n != nil {
				return n, nil
			}
			if err != nil && !ambiguous(err) {
				break
			}
			if err != nil {
				continue
			}
			look, unsure = false, false // not there: the create never reached the server
		}
		o.session = b.conn.SessionID()
		var n *node
		if n, err = b.createNode(ctx, dir, stem, data); err == nil {
			n.hold = req.Hold
			return n, nil
		}
		if p := inFlight(err); p != nil {
			unsure, pending = true, p
			break
		}
		switch {
		case ambiguous(err):
			look, unsure = true, true
		case err == zk.ErrSessionExpired:
			// The node, had it been made, ended with the session: create it again.
		default:
			return nil, classify(err)
		}
	}
	if unsure {
		b.owed.Owe(o, pending)
	}
	if ctx.Err() != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: creating the lock node of %q: %w", driver.ErrUnavailable, req.Name, err)
}

// recover returns the first node in dir named by one of left that is this session's and holds
// req's hold, or nil when there is none. It returns go-zookeeper's errors unwrapped, so that
// join can tell an ambiguous outcome.
func (b *Backend) recover(ctx context.Context, dir string, req driver.Request, left []owed) (*node, error) {
	session := b.conn.SessionID()
	var guids []string
	for _, o := range left {
		// A node made under a session that has since ended is gone with it.
		if o.guid != "" && (o.session == 0 || o.session == session) {
			guids = append(guids, o.guid)
		}
	}
	if len(guids) == 0 {
		return nil, nil
	}
	children, err := b.children(ctx, dir)
	if err == zk.ErrNoNode {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	q := lineUp(children, req.Limit > 0)
	for _, guid := range guids {
		e, ok := findGUID(q, guid)
		if !ok {
			continue
		}
		path := dir + "/" + e.name
		data, stat, err := b.read(ctx, path)
		if err == errVanished {
			continue
		}
		if err != nil {
			return nil, err
		}
		if stat.EphemeralOwner != b.conn.SessionID() || data.owner != req.Owner || !data.has(req.Hold) {
			continue
		}
		return &node{path: path, name: e.name, session: stat.EphemeralOwner, hold: req.Hold, data: data, version: stat.Version, stat: stat}, nil
	}
	return nil, nil
}

// createNode makes a lock or permit node named stem and a sequence number in dir. It returns
// go-zookeeper's errors unwrapped, so that join can tell an ambiguous outcome.
func (b *Backend) createNode(ctx context.Context, dir, stem string, data lockData) (*node, error) {
	enc := data.encode()
	for range lookTries {
		sent := time.Now()
		if !b.busy(dir) {
			// Most locks are free when asked for, and a free lock has no directory (the last
			// release removes it): create both at once, in one round trip. The SetData is
			// there for its reply, which carries the node's czxid, the fencing token. Where
			// others were in line a moment ago (busy), the directory is most likely there, and
			// this would be a write that fails.
			name := stem + firstSequence
			path := dir + "/" + name
			res, err := b.multi(ctx,
				&zk.CreateRequest{Path: dir, Acl: b.acl, Flags: zk.FlagPersistent},
				&zk.CreateRequest{Path: path, Data: enc, Acl: b.acl, Flags: zk.FlagEphemeral},
				&zk.SetDataRequest{Path: path, Data: enc, Version: 0},
			)
			switch {
			case err == nil && len(res) == 3 && res[2].Stat != nil:
				st := res[2].Stat
				return &node{path: path, name: name, session: st.EphemeralOwner, data: data, version: st.Version, stat: st, first: true, sent: sent}, nil
			case err == nil:
				return nil, fmt.Errorf("fencelock/zk: unexpected reply to creating %s: %+v", path, res)
			case err == zk.ErrNoNode:
				// The root is missing.
				if err := b.makeRoot(ctx); err != nil {
					return nil, err
				}
				continue
			case err != zk.ErrNodeExists:
				return nil, err
			}
			b.busy(dir, true)
			sent = time.Now()
		}
		// The directory exists: others are in line, or were a moment ago. The node's name is
		// known only once it is made, so the SetData that brings back its czxid is of the
		// directory, changed in the same transaction: the directory's mzxid is then the node's
		// czxid. (Its data stays empty; nothing watches it.) It saves a read of the node.
		session := b.conn.SessionID()
		res, err := b.multi(ctx,
			&zk.CreateRequest{Path: dir + "/" + stem, Data: enc, Acl: b.acl, Flags: zk.FlagEphemeral | zk.FlagSequence},
			&zk.SetDataRequest{Path: dir, Version: -1},
		)
		switch {
		case err == nil && len(res) == 2 && res[1].Stat != nil && strings.HasPrefix(res[0].String, dir+"/"):
			path := res[0].String
			n := &node{path: path, name: path[len(dir)+1:], session: session, data: data, sent: sent}
			if b.conn.SessionID() == session {
				// Made under that session: it is the node's owner, and the node is new.
				n.stat = &zk.Stat{Czxid: res[1].Stat.Mzxid, Mzxid: res[1].Stat.Mzxid, EphemeralOwner: session}
			}
			return n, nil
		case err == nil:
			return nil, fmt.Errorf("fencelock/zk: unexpected reply to creating a node in %s: %+v", dir, res)
		case err == zk.ErrNoNode:
			b.busy(dir, false) // the last one out removed the directory meanwhile
			continue
		}
		return nil, err
	}
	return nil, fmt.Errorf("%w: the directory of %s kept vanishing", driver.ErrUnavailable, dir)
}

// makeRoot creates the root and its ancestors as persistent nodes.
func (b *Backend) makeRoot(ctx context.Context) error {
	for i := 1; i <= len(b.root); i++ {
		if i < len(b.root) && b.root[i] != '/' {
			continue
		}
		_, err := b.create(ctx, b.root[:i], nil, zk.FlagPersistent)
		if err != nil && err != zk.ErrNodeExists {
			return err
		}
	}
	return nil
}

// parent returns the directory of a lock node.
func parent(path string) string { return path[:strings.LastIndexByte(path, '/')] }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
