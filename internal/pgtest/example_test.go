package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/internal/testserver"
)

// Two holders of the lock "order:10086" write the order's status, fenced by their tokens: the
// holder whose lock lapsed (token 41) comes back after the newer one (token 42) wrote, and is
// refused. The guard is bounded, so that a holder paused inside its transaction holds up the
// others for at most a second. It runs against the PostgreSQL the tests start, through pgx's
// database/sql driver.
func Example_fenceSQL() {
	pg, err := testserver.NewPostgres()
	if err != nil {
		log.Fatal(err)
	}
	defer pg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	db, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, status text)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO orders VALUES (10086, 'new')`); err != nil {
		log.Fatal(err)
	}
	guard := fence.SQL{}.WithBounds(time.Second, time.Second)
	if err := guard.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}

	ship := func(token int64, status string) error {
		return guard.Update(ctx, db, "order:10086", token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE orders SET status = $1 WHERE id = 10086`, status)
			return err
		})
	}
	fmt.Println(ship(42, "shipped by the new holder"))
	err = ship(41, "shipped again by the lapsed holder")
	fmt.Println(errors.Is(err, fence.ErrStale), err)

	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = 10086`).Scan(&status); err != nil {
		log.Fatal(err)
	}
	fmt.Println(status)
	// Output:
	// <nil>
	// true fence: stale token 41 for resource "order:10086" (latest accepted token: 42)
	// shipped by the new holder
}
