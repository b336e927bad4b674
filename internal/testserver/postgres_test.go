package testserver

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
)

// The tests that query the server through a driver live in the module internal/pgtest, which
// requires lib/pq; these need none.

func TestPostgresClose(t *testing.T) {
	t.Parallel()
	p, err := NewPostgres()
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	// An open client session must not hold up shutdown.
	c, err := pgSession(context.Background(), net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	assertProcessGone(t, pid)
	if _, err := os.Stat(p.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s still there after Close: %v", p.Dir, err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
