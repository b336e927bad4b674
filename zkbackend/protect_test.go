package zkbackend_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/driver"
	"github.com/fencelock/fencelock/zkbackend"
	"github.com/fencelock/fencelock/zkbackend/zktest"
)

// After a create whose reply was lost, the retry finds the node that create made, by its
// GUID, instead of queueing a second node and leaving the first one orphaned in line.
func TestRetryFindsItsNodeByGUID(t *testing.T) {
	conn := dial(t, server.Addr, nil)
	b := newBackend(conn)
	ctx := ctxTimeout(t, 10*time.Second)

	for _, made := range []bool{true, false} {
		name := lockName(t) + map[bool]string{true: "-made", false: "-not-made"}[made]
		dir := b.Path(name)
		guid := zkbackend.NewGUID()
		req := driver.Request{Name: name, Owner: "owner", Hold: "h", TTL: sessionTimeout}
		var czxid int64
		if made {
			// What the lost create did, under the same session.
			for _, p := range []string{"/fencelock", dir} {
				if _, err := conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
					t.Fatal(err)
				}
			}
			path, err := conn.Create(dir+"/"+zkbackend.NodeStem(guid), zkbackend.EncodeData("owner", "h"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			if err != nil {
				t.Fatal(err)
			}
			_, stat, err := conn.Exists(path)
			if err != nil {
				t.Fatal(err)
			}
			czxid = stat.Czxid
		}

		g, err := b.AcquireRetry(ctx, req, guid, true)
		if err != nil {
			t.Fatal(err)
		}
		q := line(t, conn, dir)
		if len(q) != 1 {
			t.Fatalf("made %v: line %v, want one node", made, q)
		}
		if made && (g.Token != czxid || g.Count != 1) {
			t.Fatalf("grant %+v, want the node made before (czxid %d)", g, czxid)
		}
		if n, err := b.Release(ctx, driver.Lease{Name: name, Owner: "owner"}, "h"); n != 0 || err != nil {
			t.Fatalf("release: %d %v", n, err)
		}
		if exists(t, conn, dir) {
			t.Fatalf("%s left behind", dir)
		}
	}
}

// The same, over a real connection loss: the server makes the node, the reply is lost, the
// connection closes, and go-zookeeper reconnects within the same session.
func TestConnectionLossDuringCreate(t *testing.T) {
	var link zktest.Link
	conn := dial(t, server.Addr, link.Dial)
	b := newBackend(conn)
	admin := dial(t, server.Addr, nil)
	ctx := ctxTimeout(t, 20*time.Second)
	name := lockName(t)
	dir := b.Path(name)
	session := conn.SessionID()
	// With the root missing the lost create would fail on the server, and the test would
	// show nothing.
	if _, err := admin.Create("/fencelock", nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		t.Fatal(err)
	}

	guid := zkbackend.NewGUID()
	link.LoseReply([]byte(guid))
	start := time.Now()
	g, err := b.AcquireGUID(ctx, driver.Request{Name: name, Owner: "owner", Hold: "h", TTL: sessionTimeout}, guid)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if link.Dials() < 2 || conn.SessionID() != session {
		t.Fatalf("expected a reconnect within the same session: %d dials, session %x then %x", link.Dials(), session, conn.SessionID())
	}
	q := line(t, admin, dir)
	if len(q) != 1 {
		t.Fatalf("line %v, want exactly the one node", q)
	}
	_, stat, err := admin.Exists(dir + "/" + q[0])
	if err != nil || stat.Czxid != g.Token || stat.EphemeralOwner != session {
		t.Fatalf("the node held is not this session's: %+v %v, grant %+v", stat, err, g)
	}
	// go-zookeeper waits a second before it redials a lone server, so a node made by a
	// second create would be a second younger than the request that was cut off.
	if made := time.UnixMilli(stat.Ctime).Sub(start); made > took/2 {
		t.Fatalf("the node was made %v after the first create was sent (the call took %v): it is a second create's, not the lost one's", made, took)
	}
	if n, err := b.Release(ctx, driver.Lease{Name: name, Owner: "owner"}, "h"); n != 0 || err != nil {
		t.Fatalf("release: %d %v", n, err)
	}
	if exists(t, admin, dir) || b.Owed() != 0 {
		t.Fatalf("left behind: directory %v, %d owed", exists(t, admin, dir), b.Owed())
	}
}
