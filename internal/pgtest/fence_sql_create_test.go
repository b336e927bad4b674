package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
)

// Instances that start together each call CreateTable at once. Before CreateTable retried
// the statement, one of them failed with PostgreSQL's unique violation (23505) on
// pg_type_typname_nsp_index: CREATE TABLE IF NOT EXISTS checks for the table before it
// inserts its catalog rows, so two creators both find none and the second fails on the
// first one's row. Each round takes a fresh table, each instance its own connection, and all
// of them wait on one gate so that their statements meet on the server.
func TestSQLCreateTableConcurrent(t *testing.T) {
	pg := testserver.StartPostgres(t)
	const instances, rounds = 8, 6
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, err := sql.Open(driver, pg.DSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			conns := make([]*sql.Conn, instances)
			for i := range conns {
				if conns[i], err = db.Conn(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conns[i].Close() })
			}
			for round := range rounds {
				g, err := fence.NewSQL(fmt.Sprintf("create_%s_%d", driver, round))
				if err != nil {
					t.Fatal(err)
				}
				gate := make(chan struct{})
				errs := make(chan error, instances)
				var wg sync.WaitGroup
				for _, c := range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-gate
						errs <- g.CreateTable(ctx, c)
					}()
				}
				close(gate)
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatalf("round %d: CreateTable from one of %d instances at once: %v", round, instances, err)
					}
				}
				if err := g.Update(ctx, db, "r", 1, func(*sql.Tx) error { return nil }); err != nil {
					t.Fatalf("round %d: the table CreateTable made: %v", round, err)
				}
			}
		})
	}
}
