package testserver

import (
	"context"
	"os"
	"testing"
)

func TestPostgresSelect(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	db, err := p.DB()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	// The connecting user is the superuser initdb created, so tests can
	// create schemas freely.
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
}

func TestPostgresClose(t *testing.T) {
	t.Parallel()
	p, err := NewPostgres()
	if err != nil {
		t.Fatal(err)
	}
	pid := p.proc.pid()
	db, err := p.DB()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// An open client connection must not hold up shutdown.
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
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
