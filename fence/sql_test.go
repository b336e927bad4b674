package fence

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The tests against a real PostgreSQL server are in the module internal/pgtest, which
// requires the driver, lib/pq; these need none.

func TestNewSQLTableNames(t *testing.T) {
	good := map[string]string{
		"":                      `"fence_tokens"`,
		"fence_tokens":          `"fence_tokens"`,
		"_t1":                   `"_t1"`,
		"Tokens":                `"Tokens"`,
		"app.fence":             `"app"."fence"`,
		"user":                  `"user"`, // reserved word, fine once quoted
		strings.Repeat("a", 63): `"` + strings.Repeat("a", 63) + `"`,
	}
	for in, want := range good {
		s, err := NewSQL(in)
		if err != nil {
			t.Fatalf("NewSQL(%q): %v", in, err)
		}
		if s.Table() != want {
			t.Fatalf("NewSQL(%q).Table() = %s, want %s", in, s.Table(), want)
		}
	}
	var zero SQL
	if zero.Table() != `"fence_tokens"` {
		t.Fatalf("zero SQL table = %s", zero.Table())
	}
	bad := []string{
		"1abc", "a-b", "a b", `a"b`, "t; DROP TABLE x", "t--", "a.b.c", ".t", "t.",
		"tokens(", "é", strings.Repeat("a", 64), `"quoted"`,
	}
	for _, in := range bad {
		if s, err := NewSQL(in); !errors.Is(err, ErrInvalid) {
			t.Fatalf("NewSQL(%q) = %v, %v; want ErrInvalid", in, s, err)
		}
	}
}

func TestSQLInvalidArgs(t *testing.T) {
	ctx := context.Background()
	var s SQL
	var nilDB *sql.DB
	var nilTx *sql.Tx
	if err := s.Check(ctx, nil, "r", 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nil Execer: %v", err)
	}
	if err := s.Check(ctx, nilTx, "r", 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nil *sql.Tx: %v", err)
	}
	if err := s.Check(ctx, nilTx, "", 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty resource: %v", err)
	}
	if err := s.CreateTable(ctx, nilDB); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CreateTable nil: %v", err)
	}
	if err := s.Update(ctx, nil, "r", 1, func(*sql.Tx) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Update nil db: %v", err)
	}
	if err := s.Update(ctx, nil, "r", 0, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Update zero token: %v", err)
	}
	if err := CheckRows(nil, "r", 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("CheckRows nil: %v", err)
	}
}

// Check takes only a transaction: a *sql.DB or *sql.Conn would commit the
// check on its own, apart from the write it guards.
func TestSQLCheckTakesOnlyATransaction(t *testing.T) {
	param := reflect.TypeOf((*SQL).Check).In(2)
	for _, h := range []reflect.Type{reflect.TypeFor[*sql.DB](), reflect.TypeFor[*sql.Conn]()} {
		if h.AssignableTo(param) {
			t.Errorf("Check takes a %v, whose statements commit on their own, apart from the write they guard", h)
		}
	}
	if !reflect.TypeFor[*sql.Tx]().AssignableTo(param) {
		t.Errorf("Check does not take a *sql.Tx")
	}
}

type rows int64

func (r rows) LastInsertId() (int64, error) { return 0, errors.New("no id") }
func (r rows) RowsAffected() (int64, error) {
	if r < 0 {
		return 0, errors.New("rows affected not supported")
	}
	return int64(r), nil
}

func TestCheckRowsResults(t *testing.T) {
	if err := CheckRows(rows(1), "r", 3); err != nil {
		t.Fatal(err)
	}
	err := CheckRows(rows(0), "r", 3)
	var se *StaleError
	if !errors.Is(err, ErrStale) || !errors.As(err, &se) || se.Latest != 0 || se.Token != 3 || se.Resource != "r" {
		t.Fatalf("CheckRows(0 rows) = %v", err)
	}
	if err := CheckRows(rows(-1), "r", 3); err == nil || errors.Is(err, ErrStale) {
		t.Fatalf("CheckRows(RowsAffected error) = %v", err)
	}
}
