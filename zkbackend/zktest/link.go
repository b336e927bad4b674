package zktest

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Link is a dialer for zk.WithDialer whose connections a test can cut, as a network partition
// between one client and the server would: the client's own reconnect logic, session handling
// and watches run for real against a real server. The zero value forwards; it is safe for
// concurrent use.
type Link struct {
	mu        sync.Mutex // guards the fields below
	cut       bool
	conns     map[*linkConn]struct{}
	loseReply []byte            // when set, the reply to the next write that contains it is lost
	cutBefore func([]byte) bool // when set, the link is cut as the next write it matches goes out
	dials     int               // connections made
}

var errCut = errors.New("zktest: link cut")

// Dial has the signature of zk.Dialer.
func (l *Link) Dial(network, address string, timeout time.Duration) (net.Conn, error) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	if cut {
		return nil, errCut
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	lc := &linkConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		c.Close()
		return nil, errCut
	}
	if l.conns == nil {
		l.conns = make(map[*linkConn]struct{})
	}
	l.conns[lc] = struct{}{}
	l.dials++
	return lc, nil
}

// Dials returns the number of connections made through l: more than one means the client
// reconnected.
func (l *Link) Dials() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dials
}

// Cut closes every open connection and fails every dial until Restore. The server sees the
// client go away and keeps its session until the session timeout passes.
func (l *Link) Cut() {
	l.mu.Lock()
	l.cut = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// Restore lets dials through again.
func (l *Link) Restore() {
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
}

// LoseReply arranges for the reply to the next request that contains pattern to be lost: the
// request reaches the server, which acts on it, but the client reads nothing more on that
// connection, which closes a moment later, as after a network failure. That is the ambiguous
// outcome of a request cut off mid-way. (Closing at once is not the same: the server drops the
// requests of a connection that closed before it got to them.) Later dials succeed.
func (l *Link) LoseReply(pattern []byte) {
	l.mu.Lock()
	l.loseReply = bytes.Clone(pattern)
	l.mu.Unlock()
}

// CutBefore arranges for the link to be cut, as Cut does, as the next request that match
// reports true for is about to go out: that request never reaches the server, and the client
// sees its connection fail under it. Dials fail until Restore. match gets the bytes of each
// write, a request as go-zookeeper frames it.
func (l *Link) CutBefore(match func(request []byte) bool) {
	l.mu.Lock()
	l.cutBefore = match
	l.mu.Unlock()
}

// replyLinger is how long a connection whose reply is lost stays open: long enough for the
// server to act on the request, shorter than go-zookeeper's read timeout.
const replyLinger = 200 * time.Millisecond

type linkConn struct {
	net.Conn
	l     *Link
	muted atomic.Bool // replies are lost from now on
}

func (c *linkConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	lose := c.l.loseReply != nil && bytes.Contains(p, c.l.loseReply)
	if lose {
		c.l.loseReply = nil
	}
	cut := c.l.cutBefore != nil && c.l.cutBefore(p)
	if cut {
		c.l.cutBefore = nil
	}
	c.l.mu.Unlock()
	if cut {
		c.l.Cut()
		return 0, errCut
	}
	if lose {
		// Muted before the request goes out: a reply read before this would slip through.
		c.muted.Store(true)
		time.AfterFunc(replyLinger, func() { _ = c.Close() })
	}
	return c.Conn.Write(p)
}

func (c *linkConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for c.muted.Load() {
		if err != nil {
			return 0, err
		}
		_, err = c.Conn.Read(p)
	}
	return n, err
}

func (c *linkConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
