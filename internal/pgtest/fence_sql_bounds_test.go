package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql
	_ "github.com/lib/pq"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
)

// drivers are the database/sql drivers fence.SQL is tested with: lib/pq, and pgx through its
// database/sql driver, the one most Go teams use.
var drivers = []string{"postgres", "pgx"}

// A holder paused inside Update (its write sits between statements) no longer holds up the
// others for the whole pause. With a lock wait, another holder's Update gives up with ErrBusy
// while the first still holds the row; with an idle bound, the server ends the paused
// transaction, its write is not committed, and the other holder's Update goes through while
// the first is still paused. Before WithBounds the other Update waited out the whole pause.
func TestSQLUpdateBounds(t *testing.T) {
	pg := testserver.StartPostgres(t)
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, err := sql.Open(driver, pg.DSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			g, err := fence.NewSQL("bounds_" + driver)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.CreateTable(ctx, db); err != nil {
				t.Fatal(err)
			}

			t.Run("lock wait", func(t *testing.T) {
				checked, resume := make(chan struct{}), make(chan struct{})
				first := make(chan error, 1)
				go func() {
					first <- g.Update(ctx, db, "wait", 1, func(*sql.Tx) error {
						close(checked)
						<-resume // paused, holding the row
						return nil
					})
				}()
				<-checked
				err := g.WithBounds(200*time.Millisecond, 0).Update(ctx, db, "wait", 2, func(*sql.Tx) error {
					t.Error("the write ran while another transaction held the row")
					return nil
				})
				select {
				case err := <-first:
					t.Fatalf("the paused holder returned (%v) before the other gave up", err)
				default:
				}
				if !errors.Is(err, fence.ErrBusy) || errors.Is(err, fence.ErrStale) {
					t.Fatalf("Update behind a paused holder, with a lock wait: %v, want ErrBusy", err)
				}
				close(resume)
				if err := <-first; err != nil {
					t.Fatalf("the paused holder, resumed: %v", err)
				}
				if latest, err := g.Latest(ctx, db, "wait"); err != nil || latest != 1 {
					t.Fatalf("latest token %d, %v: want the paused holder's 1", latest, err)
				}
			})

			t.Run("idle", func(t *testing.T) {
				checked, resume := make(chan struct{}), make(chan struct{})
				first := make(chan error, 1)
				go func() {
					first <- g.WithBounds(0, 300*time.Millisecond).Update(ctx, db, "idle", 1, func(tx *sql.Tx) error {
						close(checked)
						<-resume // paused past the idle bound
						_, err := tx.ExecContext(ctx, "SELECT 1")
						return err
					})
				}()
				<-checked
				if err := g.Update(ctx, db, "idle", 2, func(*sql.Tx) error { return nil }); err != nil {
					t.Fatalf("Update behind a holder paused past its idle bound: %v", err)
				}
				select {
				case err := <-first:
					t.Fatalf("the paused holder returned (%v) before the other went through", err)
				default:
				}
				close(resume)
				if err := <-first; err == nil {
					t.Fatal("the write of a transaction the server ended was committed")
				}
				if latest, err := g.Latest(ctx, db, "idle"); err != nil || latest != 2 {
					t.Fatalf("latest token %d, %v: want the second holder's 2", latest, err)
				}
			})

			t.Run("bad bounds", func(t *testing.T) {
				err := g.WithBounds(-time.Second, 0).Update(ctx, db, "bad", 1, func(*sql.Tx) error {
					t.Error("write ran")
					return nil
				})
				if !errors.Is(err, fence.ErrInvalid) {
					t.Fatalf("a negative lock wait: %v, want ErrInvalid", err)
				}
			})
		})
	}
}
