package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fencelock/fence"
)

// fencedWrite is what the package documentation tells a caller to do at isolation level iso:
// check the token and write in one transaction, and what to do with a serialization failure.
// tries counts the transactions it ran; first is the first one's error.
func fencedWrite(ctx context.Context, db *sql.DB, s *fence.SQL, iso sql.IsolationLevel, r string, token int64, tries *int, first *error) error {
	for {
		*tries++
		err := func() error {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := s.Check(ctx, tx, r, token); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE iso_items SET v = $1 WHERE id = $2`, token, r); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if *tries == 1 {
			*first = err
		}
		if fence.IsSerializationFailure(err) && *tries < 5 {
			continue // documented: roll back and run the whole transaction again
		}
		return err
	}
}

// At every isolation level, the documented way of using Check lets the newer token's write
// win, whichever transaction checks first; at REPEATABLE READ and SERIALIZABLE the
// transaction that waited fails with a serialization failure once, whatever its token.
func TestSQLIsolationLevels(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := openPostgres(t, driver)
			ctx := context.Background()
			var s fence.SQL
			if err := s.CreateTable(ctx, db); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `CREATE TABLE iso_items (id TEXT PRIMARY KEY, v BIGINT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			for _, iso := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable} {
				for _, order := range [][2]int64{{5, 6}, {6, 5}} {
					first, second := order[0], order[1]
					t.Run(fmt.Sprintf("%v/%d_first", iso, first), func(t *testing.T) {
						r := fmt.Sprintf("iso-%d-%d-%d", iso, first, second)
						if _, err := db.ExecContext(ctx, `INSERT INTO iso_items VALUES ($1, 0)`, r); err != nil {
							t.Fatal(err)
						}
						// The resource has been written before, so that both transactions meet on its row.
						if err := s.Update(ctx, db, r, 1, func(*sql.Tx) error { return nil }); err != nil {
							t.Fatal(err)
						}
						tx1, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
						if err != nil {
							t.Fatal(err)
						}
						defer tx1.Rollback()
						if err := s.Check(ctx, tx1, r, first); err != nil {
							t.Fatal(err)
						}
						var tries int
						var firstErr error
						done := make(chan error, 1)
						go func() { done <- fencedWrite(ctx, db, &s, iso, r, second, &tries, &firstErr) }()
						waitForLockWait(t, db)
						if _, err := tx1.ExecContext(ctx, `UPDATE iso_items SET v = $1 WHERE id = $2`, first, r); err != nil {
							t.Fatal(err)
						}
						if err := tx1.Commit(); err != nil {
							t.Fatal(err)
						}
						err = <-done
						switch {
						case second == 6 && err != nil:
							t.Fatalf("the newer token's write: %v (first try: %v)", err, firstErr)
						case second == 5 && !errors.Is(err, fence.ErrStale):
							t.Fatalf("the older token's write: %v, want ErrStale (first try: %v)", err, firstErr)
						}
						var v int64
						if err := db.QueryRowContext(ctx, `SELECT v FROM iso_items WHERE id = $1`, r).Scan(&v); err != nil {
							t.Fatal(err)
						}
						if latest, err := s.Latest(ctx, db, r); err != nil || v != 6 || latest != 6 {
							t.Fatalf("final value %d, latest token %d (%v); want 6 and 6", v, latest, err)
						}
						wantRetry := iso != sql.LevelReadCommitted
						if fence.IsSerializationFailure(firstErr) != wantRetry {
							t.Fatalf("first try at %v: %v; serialization failure expected: %v", iso, firstErr, wantRetry)
						}
						t.Logf("%d transaction(s); the first: %v", tries, firstErr)
					})
				}
			}
		})
	}
}

// At REPEATABLE READ, a Check on a row that changed after the transaction's snapshot fails
// with a serialization failure without waiting for anyone, also with a newer token.
func TestSQLRepeatableReadSnapshot(t *testing.T) {
	db := openPostgres(t, "postgres")
	ctx := context.Background()
	var s fence.SQL
	if err := s.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	nop := func(*sql.Tx) error { return nil }
	if err := s.Update(ctx, db, "snap", 1, nop); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := s.Latest(ctx, tx, "snap"); err != nil { // the snapshot is taken here
		t.Fatal(err)
	}
	if err := s.Update(ctx, db, "snap", 7, nop); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx, tx, "snap", 8); !fence.IsSerializationFailure(err) {
		t.Fatalf("Check of a newer token on a row changed since the snapshot: %v, want a serialization failure", err)
	}
}
