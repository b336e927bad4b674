package testserver

import (
	"context"
	"database/sql"
	"net"
	"os"
	"strconv"
	"testing"

	_ "github.com/lib/pq"
)

// TestPostgresSelect checks testserver's PostgreSQL through a driver: it answers queries, as
// the superuser initdb created, so tests can create schemas freely.
func TestPostgresSelect(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	db, err := sql.Open("postgres", p.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	var user string
	var super bool
	if err := db.QueryRowContext(ctx, "SELECT current_user, usesuper FROM pg_user WHERE usename = current_user").Scan(&user, &super); err != nil {
		t.Fatal(err)
	}
	if user != PostgresUser || !super {
		t.Fatalf("connected as %q (superuser %v), want superuser %q", user, super, PostgresUser)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (id bigint PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// The URL form reaches the same server.
	udb, err := sql.Open("postgres", p.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer udb.Close()
	var n int
	if err := udb.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("through URL: count = %d, %v", n, err)
	}
}

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
