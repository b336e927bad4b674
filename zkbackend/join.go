package zkbackend

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock"
)

// node is the lock node one acquisition made: its place in line.
type node struct {
	path    string
	name    string
	session int64  // the session it was made under
	hold    string // the hold it was made for
	data    lockData
	version int32
	stat    *zk.Stat // known when the create returned it, else nil
	first   bool     // made together with the lock's directory, so first in line
}

// createBackoff spaces the attempts of join after a connection loss. go-zookeeper fails the
// requests sent while it reconnects, and, with a single server, waits a second before it dials
// again; the attempts must outlast that.
var createBackoff = [...]time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}

// join puts a lock node for req in line. When a create fails with the connection, its node may
// exist all the same: join then looks for it by guid before creating again (Curator's
// protection mode), and when it cannot tell, leaves it to the sweep rather than in the queue.
// unsure says such a create happened before the call.
func (b *Backend) join(ctx context.Context, req fencelock.Request, guid string, unsure bool) (*node, error) {
	dir := b.Path(req.Name)
	data := lockData{owner: req.Owner, meta: req.Meta, holds: []string{req.Hold}}
	session := b.conn.SessionID() // of the last create, whose node recover may look for
	var err error
	for _, pause := range createBackoff {
		if pause > 0 {
			if serr := sleep(ctx, pause); serr != nil {
				err = serr
				break
			}
		}
		if unsure {
			var n *node
			if n, err = b.recover(dir, guid, session); n != nil || (err != nil && !ambiguous(err)) {
				if n != nil {
					n.hold = req.Hold
				}
				return n, classify(err)
			}
			if err != nil {
				continue
			}
			unsure = false // not there: the create never reached the server
		}
		var n *node
		session = b.conn.SessionID()
		if n, err = b.create(dir, guid, data); err == nil {
			n.session, n.hold = session, req.Hold
			return n, nil
		}
		switch {
		case ambiguous(err):
			unsure = true
		case err == zk.ErrSessionExpired:
			// The node, had it been made, ended with the session: create it again.
		default:
			return nil, classify(err)
		}
	}
	if unsure {
		b.abandon(orphan{name: req.Name, guid: guid, owner: req.Owner, hold: req.Hold, session: session})
	}
	if ctx.Err() != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: creating the lock node of %q: %w", fencelock.ErrUnavailable, req.Name, err)
}

// recover returns the node named by guid in dir, or nil when there is none. session is the
// session the node would have been made under; 0 is unknown (go-zookeeper was between
// sessions).
func (b *Backend) recover(dir, guid string, session int64) (*node, error) {
	if session != 0 && b.conn.SessionID() != session {
		return nil, nil // a node made under the old session is gone with it
	}
	children, _, err := b.conn.Children(dir)
	if err == zk.ErrNoNode {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e, ok := findGUID(lineUp(children), guid)
	if !ok {
		return nil, nil
	}
	path := dir + "/" + e.name
	data, stat, err := b.read(path)
	if err == errVanished {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &node{path: path, name: e.name, session: session, data: data, version: stat.Version, stat: stat}, nil
}

// create makes a lock node in dir. It returns go-zookeeper's errors unwrapped, so that join can
// tell an ambiguous outcome.
func (b *Backend) create(dir, guid string, data lockData) (*node, error) {
	enc := data.encode()
	for range lookTries {
		// Most locks are free when asked for, and a free lock has no directory (the last
		// release removes it): create both at once, in one round trip. The SetData is there
		// for its reply, which carries the node's czxid, the fencing token.
		name := firstNodeName(guid)
		path := dir + "/" + name
		res, err := b.conn.Multi(
			&zk.CreateRequest{Path: dir, Acl: b.acl, Flags: zk.FlagPersistent},
			&zk.CreateRequest{Path: path, Data: enc, Acl: b.acl, Flags: zk.FlagEphemeral},
			&zk.SetDataRequest{Path: path, Data: enc, Version: 0},
		)
		switch {
		case err == nil && len(res) == 3 && res[2].Stat != nil:
			return &node{path: path, name: name, data: data, version: res[2].Stat.Version, stat: res[2].Stat, first: true}, nil
		case err == nil:
			return nil, fmt.Errorf("fencelock/zk: unexpected reply to creating %s: %+v", path, res)
		case err == zk.ErrNoNode:
			// The root is missing.
			if err := b.makeRoot(); err != nil {
				return nil, err
			}
			continue
		case err != zk.ErrNodeExists:
			return nil, err
		}
		// The directory exists: others are in line, or were a moment ago.
		path, err = b.conn.Create(dir+"/"+nodeStem(guid), enc, zk.FlagEphemeral|zk.FlagSequence, b.acl)
		switch err {
		case nil:
			return &node{path: path, name: path[len(dir)+1:], data: data}, nil
		case zk.ErrNoNode:
			continue // the last one out removed the directory meanwhile
		}
		return nil, err
	}
	return nil, fmt.Errorf("%w: the directory of %s kept vanishing", fencelock.ErrUnavailable, dir)
}

// makeRoot creates the root and its ancestors as persistent nodes.
func (b *Backend) makeRoot() error {
	for i := 1; i <= len(b.root); i++ {
		if i < len(b.root) && b.root[i] != '/' {
			continue
		}
		_, err := b.conn.Create(b.root[:i], nil, zk.FlagPersistent, b.acl)
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
