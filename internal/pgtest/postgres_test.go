package pgtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencelock/fencelock/internal/testserver"
)

// TestPostgresSelect checks testserver's PostgreSQL through a driver: it answers queries, as
// the superuser initdb created, so tests can create schemas freely.
func TestPostgresSelect(t *testing.T) {
	t.Parallel()
	p := testserver.StartPostgres(t)
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
	if user != testserver.PostgresUser || !super {
		t.Fatalf("connected as %q (superuser %v), want superuser %q", user, super, testserver.PostgresUser)
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

// openPostgres starts a PostgreSQL of the test's own and opens it with driver; both end with
// the test.
func openPostgres(t *testing.T, driver string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, testserver.StartPostgres(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
