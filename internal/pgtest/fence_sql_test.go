package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/fencelock/fencelock/fence"
)

// TestSQL runs against a real PostgreSQL server.
func TestSQL(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := openPostgres(t, driver)
			ctx := context.Background()
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}

			t.Run("CreateTable", func(t *testing.T) {
				s, err := fence.NewSQL("create_test")
				if err != nil {
					t.Fatal(err)
				}
				for range 2 { // IF NOT EXISTS: twice is fine
					if err := s.CreateTable(ctx, db); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := db.ExecContext(ctx, `CREATE SCHEMA app`); err != nil {
					t.Fatal(err)
				}
				q, err := fence.NewSQL("app.Tokens")
				if err != nil {
					t.Fatal(err)
				}
				if err := q.CreateTable(ctx, db); err != nil {
					t.Fatal(err)
				}
				if err := q.Update(ctx, db, "x", 2, func(*sql.Tx) error { return nil }); err != nil {
					t.Fatal(err)
				}
				if err := q.Update(ctx, db, "x", 1, func(*sql.Tx) error { return nil }); !errors.Is(err, fence.ErrStale) {
					t.Fatalf("qualified table: %v", err)
				}
			})

			// Default table, shared by the subtests below (distinct resources).
			var s fence.SQL
			if err := s.CreateTable(ctx, db); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, stock INT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`); err != nil {
				t.Fatal(err)
			}
			setStock := func(resource string, token int64, stock int) error {
				return s.Update(ctx, db, resource, token, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx,
						`INSERT INTO items (id, stock) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET stock = EXCLUDED.stock`,
						resource, stock)
					return err
				})
			}
			stockOf := func(t *testing.T, id string) int {
				t.Helper()
				var n int
				if err := db.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = $1`, id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			latestOf := func(t *testing.T, resource string) int64 {
				t.Helper()
				l, err := s.Latest(ctx, db, resource)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}

			t.Run("StaleRefusedEqualAccepted", func(t *testing.T) {
				const r = "item-a"
				if got := latestOf(t, r); got != 0 {
					t.Fatalf("Latest before any write = %d", got)
				}
				if err := setStock(r, 10, 100); err != nil {
					t.Fatal(err)
				}
				err := setStock(r, 9, 999)
				var se *fence.StaleError
				if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
					t.Fatalf("stale Update = %v, want ErrStale", err)
				}
				if se.Resource != r || se.Token != 9 || se.Latest != 10 {
					t.Fatalf("StaleError = %+v", *se)
				}
				if got := stockOf(t, r); got != 100 {
					t.Fatalf("stock after stale write = %d, want 100 (unchanged)", got)
				}
				if err := setStock(r, 10, 90); err != nil {
					t.Fatalf("equal token: %v", err)
				}
				if got := stockOf(t, r); got != 90 {
					t.Fatalf("stock after equal-token write = %d, want 90", got)
				}
				if err := setStock(r, 11, 80); err != nil {
					t.Fatal(err)
				}
				if got, l := stockOf(t, r), latestOf(t, r); got != 80 || l != 11 {
					t.Fatalf("stock, latest = %d, %d; want 80, 11", got, l)
				}
			})

			t.Run("FailedWriteRollsBackToken", func(t *testing.T) {
				const r = "item-b"
				if err := setStock(r, 5, 1); err != nil {
					t.Fatal(err)
				}
				boom := errors.New("boom")
				err := s.Update(ctx, db, r, 8, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, `UPDATE items SET stock = 2 WHERE id = $1`, r); err != nil {
						return err
					}
					return boom
				})
				if err != boom {
					t.Fatalf("Update = %v, want write's error", err)
				}
				if got, l := stockOf(t, r), latestOf(t, r); got != 1 || l != 5 {
					t.Fatalf("after failed write: stock %d latest %d, want 1 and 5 (rolled back)", got, l)
				}
				if err := setStock(r, 6, 3); err != nil {
					t.Fatal(err)
				}
			})

			t.Run("CheckInCallerTx", func(t *testing.T) {
				const r = "item-c"
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Check(ctx, tx, r, 4); err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				if l := latestOf(t, r); l != 0 {
					t.Fatalf("rolled back Check recorded token %d", l)
				}
				tx, err = db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if err := s.Check(ctx, tx, r, 4); err != nil {
					t.Fatal(err)
				}
				err = s.Check(ctx, tx, r, 3)
				var se *fence.StaleError
				if !errors.As(err, &se) || se.Latest != 4 {
					t.Fatalf("stale Check = %v", err)
				}
				// The transaction is still usable after a refusal.
				if err := s.Check(ctx, tx, r, 4); err != nil {
					t.Fatalf("Check after refusal: %v", err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if l := latestOf(t, r); l != 4 {
					t.Fatalf("latest = %d, want 4", l)
				}
			})

			// Two transactions race with tokens 5 and 6, in both orders: the
			// second one's Check blocks on the first one's row lock, and the
			// write of token 6 always wins.
			for _, order := range [][2]int64{{6, 5}, {5, 6}} {
				t.Run(fmt.Sprintf("ConcurrentTx_%d_first", order[0]), func(t *testing.T) {
					r := fmt.Sprintf("race-%d-%d", order[0], order[1])
					if _, err := db.ExecContext(ctx, `INSERT INTO items (id, stock) VALUES ($1, 0)`, r); err != nil {
						t.Fatal(err)
					}
					first, second := order[0], order[1]
					tx1, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer tx1.Rollback()
					if err := s.Check(ctx, tx1, r, first); err != nil {
						t.Fatal(err)
					}

					// The second transaction starts while the first is open.
					done := make(chan error, 1)
					go func() {
						done <- s.Update(ctx, db, r, second, func(tx *sql.Tx) error {
							_, err := tx.ExecContext(ctx, `UPDATE items SET stock = $1 WHERE id = $2`, second, r)
							return err
						})
					}()
					waitForLockWait(t, db)
					select {
					case err := <-done:
						t.Fatalf("second transaction did not wait for the first: %v", err)
					default:
					}

					if _, err := tx1.ExecContext(ctx, `UPDATE items SET stock = $1 WHERE id = $2`, first, r); err != nil {
						t.Fatal(err)
					}
					if err := tx1.Commit(); err != nil {
						t.Fatal(err)
					}
					err = <-done
					if second < first {
						if !errors.Is(err, fence.ErrStale) {
							t.Fatalf("older second transaction: %v, want ErrStale", err)
						}
					} else if err != nil {
						t.Fatalf("newer second transaction: %v", err)
					}
					if got, l := stockOf(t, r), latestOf(t, r); got != 6 || l != 6 {
						t.Fatalf("final stock %d latest %d, want token 6's write", got, l)
					}
				})
			}

			// Many racing transactions with random tokens: a log row inserted by
			// each committed write (ids from a sequence, so in write order) must
			// show non-decreasing tokens, and the last write must be the greatest.
			t.Run("ConcurrentStress", func(t *testing.T) {
				const r = "stress"
				if _, err := db.ExecContext(ctx, `CREATE TABLE write_log (id BIGSERIAL PRIMARY KEY, token BIGINT NOT NULL)`); err != nil {
					t.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, `INSERT INTO items (id, stock) VALUES ($1, 0)`, r); err != nil {
					t.Fatal(err)
				}
				db.SetMaxOpenConns(16)
				var clock, maxTok atomic.Int64
				var accepted, refused atomic.Int64
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(g), 7))
						for range 40 {
							tok := max(1, clock.Add(1)-rng.Int64N(8))
							for m := maxTok.Load(); tok > m && !maxTok.CompareAndSwap(m, tok); m = maxTok.Load() {
							}
							err := s.Update(ctx, db, r, tok, func(tx *sql.Tx) error {
								if _, err := tx.ExecContext(ctx, `UPDATE items SET stock = $1 WHERE id = $2`, tok, r); err != nil {
									return err
								}
								_, err := tx.ExecContext(ctx, `INSERT INTO write_log (token) VALUES ($1)`, tok)
								return err
							})
							switch {
							case err == nil:
								accepted.Add(1)
							case errors.Is(err, fence.ErrStale):
								refused.Add(1)
							default:
								t.Errorf("Update(%d): %v", tok, err)
								return
							}
						}
					}()
				}
				wg.Wait()
				rs, err := db.QueryContext(ctx, `SELECT token FROM write_log ORDER BY id`)
				if err != nil {
					t.Fatal(err)
				}
				defer rs.Close()
				var prev, n int64
				for rs.Next() {
					var tok int64
					if err := rs.Scan(&tok); err != nil {
						t.Fatal(err)
					}
					if tok < prev {
						t.Fatalf("token %d written after %d", tok, prev)
					}
					prev = tok
					n++
				}
				if err := rs.Err(); err != nil {
					t.Fatal(err)
				}
				if n != accepted.Load() {
					t.Fatalf("%d log rows, %d accepted writes", n, accepted.Load())
				}
				if got, l := stockOf(t, r), latestOf(t, r); int64(got) != maxTok.Load() || l != maxTok.Load() {
					t.Fatalf("final stock %d latest %d, want max token %d", got, l, maxTok.Load())
				}
				if refused.Load() == 0 {
					t.Fatal("no write was refused; the test exercised nothing")
				}
				t.Logf("%d accepted, %d refused", accepted.Load(), refused.Load())
			})

			// The documented pattern for a token kept in the caller's own row.
			t.Run("OwnRowCheckRows", func(t *testing.T) {
				const id = "own-row"
				if _, err := db.ExecContext(ctx, `INSERT INTO items (id, stock) VALUES ($1, 50)`, id); err != nil {
					t.Fatal(err)
				}
				update := func(stock int, token int64) error {
					res, err := db.ExecContext(ctx,
						`UPDATE items SET stock = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
						stock, token, id)
					if err != nil {
						return err
					}
					return fence.CheckRows(res, "item:"+id, token)
				}
				if err := update(40, 3); err != nil {
					t.Fatal(err)
				}
				if err := update(30, 3); err != nil {
					t.Fatalf("equal token: %v", err)
				}
				err := update(99, 2)
				var se *fence.StaleError
				if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) || se.Latest != 0 || se.Token != 2 {
					t.Fatalf("stale own-row update = %v", err)
				}
				if got := stockOf(t, id); got != 30 {
					t.Fatalf("stock = %d, want 30 (unchanged)", got)
				}
			})
		})
	}
}

// waitForLockWait waits until some other session of the database is
// blocked waiting for a lock.
func waitForLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no session ever waited for a lock")
}
