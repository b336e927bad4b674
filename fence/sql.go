package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultTable is the token table used by the zero SQL and by NewSQL("").
const DefaultTable = "fence_tokens"

// Execer is the part of *sql.DB, *sql.Tx and *sql.Conn that CreateTable and
// Latest use.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Tx is the part of *sql.Tx that Check uses. Commit and Rollback are in it so
// that only a transaction satisfies it: a *sql.DB or *sql.Conn runs each
// statement in a transaction of its own, which would commit the check apart
// from the write it guards, and let a stale holder that checked before a
// newer one write after it.
type Tx interface {
	Execer
	Commit() error
	Rollback() error
}

var (
	_ Execer = (*sql.DB)(nil)
	_ Execer = (*sql.Conn)(nil)
	_ Tx     = (*sql.Tx)(nil)
)

// SQL is a fencing guard that keeps the newest accepted token of each
// resource in a PostgreSQL table:
//
//	CREATE TABLE IF NOT EXISTS fence_tokens (
//		resource TEXT PRIMARY KEY,
//		token    BIGINT NOT NULL
//	)
//
// The statements use PostgreSQL syntax ($1 placeholders, INSERT ... ON
// CONFLICT); they also work on databases that speak it, such as
// CockroachDB, but not on MySQL or SQLite.
//
// The zero value uses the table DefaultTable; use NewSQL for another
// table. A SQL holds no connection and is safe for concurrent use.
type SQL struct {
	table string // quoted, validated table name; "" means DefaultTable
	// lockWait and idle are the bounds of WithBounds; 0 leaves the server's setting.
	lockWait, idle time.Duration
}

// NewSQL returns a guard using the given table, or DefaultTable if table
// is empty. The name must be an identifier, optionally qualified by a
// schema ("schema.table"): each part starts with a letter or underscore,
// continues with letters, digits or underscores and is at most 63 bytes.
// Anything else (quotes, spaces, semicolons...) gives an error wrapping
// ErrInvalid, so the name can never inject SQL. Each part is double-quoted
// in the statements, which makes it case-sensitive: "Tokens" and "tokens"
// are different tables.
func NewSQL(table string) (*SQL, error) {
	if table == "" {
		return &SQL{}, nil
	}
	q, err := quoteTable(table)
	if err != nil {
		return nil, err
	}
	return &SQL{table: q}, nil
}

func quoteTable(table string) (string, error) {
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: table name %q: at most one schema qualifier", ErrInvalid, table)
	}
	for i, p := range parts {
		if !isIdent(p) {
			return "", fmt.Errorf("%w: table name %q: %q is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)", ErrInvalid, table, p)
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), nil
}

func isIdent(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// WithBounds returns a copy of s whose Update (and Bound) limits how long one holder's
// transaction holds up the others. Without them a holder paused inside Update — by its
// collector, a swap, a stop — keeps its resource's row locked for the whole pause, and every
// other instance's Check for that resource waits as long: a pause of 6 s under a 2 s lock TTL
// stalls them all 6 s.
//
//   - lockWait bounds how long Check waits for a row that another transaction holds
//     (PostgreSQL's lock_timeout, for this transaction only). Past it, Check fails with an
//     error matching ErrBusy and nothing is written.
//   - idle bounds how long the transaction may sit between two statements, as a paused holder
//     does, before the server ends its session (idle_in_transaction_session_timeout, for this
//     transaction only). The row lock ends with it and nothing of the transaction is
//     committed; the holder's next statement, or its commit, fails. Make it longer than any
//     work write does between its statements.
//
// Zero leaves a bound to the server's setting (off by default); a negative one makes Update
// fail with an error matching ErrInvalid. Neither bounds a single slow statement: use the
// context's deadline for that, which database/sql drivers honour by cancelling the statement.
// Server-wide, idle_in_transaction_session_timeout in postgresql.conf bounds every session
// the same way, whatever the client.
func (s SQL) WithBounds(lockWait, idle time.Duration) *SQL {
	s.lockWait, s.idle = lockWait, idle
	return &s
}

// Bound sets the bounds of WithBounds on tx, the caller's transaction, for what it has left to
// run: call it first when you use Check in a transaction of your own. Update calls it. With
// neither bound set it does nothing.
func (s *SQL) Bound(ctx context.Context, tx Tx) error {
	if err := checkExecer(tx); err != nil {
		return err
	}
	if err := s.checkBounds(); err != nil {
		return err
	}
	var set []string
	var args []any
	for _, b := range s.bounds() {
		if b.d > 0 {
			args = append(args, strconv.FormatInt(max(b.d.Milliseconds(), 1), 10))
			set = append(set, fmt.Sprintf("set_config('%s', $%d, true)", b.guc, len(args)))
		}
	}
	if len(set) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "SELECT "+strings.Join(set, ", "), args...); err != nil {
		return fmt.Errorf("fence: set the transaction's bounds: %w", err)
	}
	return nil
}

type bound struct {
	guc string // the server setting it sets
	d   time.Duration
}

func (s *SQL) bounds() [2]bound {
	return [2]bound{{"lock_timeout", s.lockWait}, {"idle_in_transaction_session_timeout", s.idle}}
}

func (s *SQL) checkBounds() error {
	for _, b := range s.bounds() {
		if b.d < 0 {
			return fmt.Errorf("%w: %s %v: want 0 (the server's setting) or more", ErrInvalid, b.guc, b.d)
		}
	}
	return nil
}

// Table returns the quoted table name used in the statements.
func (s *SQL) Table() string {
	if s.table == "" {
		return `"` + DefaultTable + `"`
	}
	return s.table
}

func checkExecer(db Execer) error {
	bad := db == nil
	switch v := db.(type) {
	case *sql.DB:
		bad = v == nil
	case *sql.Tx:
		bad = v == nil
	case *sql.Conn:
		bad = v == nil
	}
	if bad {
		return fmt.Errorf("%w: nil database handle", ErrInvalid)
	}
	return nil
}

// CreateTable creates the token table if it does not exist. Call it at start-up, before the
// first Check or Update; it is safe to call from many instances at once, as instances that
// start together do.
//
// CREATE TABLE IF NOT EXISTS alone is not: two sessions that create the same table at once
// both find it missing, and the second fails when it inserts its catalog rows beside the
// first's (a unique violation, SQLSTATE 23505, on pg_type_typname_nsp_index). That failure
// comes only once the first session has committed its table, so CreateTable then runs the
// statement again, which finds the table and does nothing. Pass a *sql.DB or *sql.Conn: in a
// *sql.Tx of yours the failed statement aborts your transaction, and the retry fails with it.
func (s *SQL) CreateTable(ctx context.Context, db Execer) error {
	if err := checkExecer(db); err != nil {
		return err
	}
	var err error
	for range createAttempts {
		_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+s.Table()+` (
	resource TEXT PRIMARY KEY,
	token    BIGINT NOT NULL
)`)
		if err == nil || !createRaced(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("fence: create table %s: %w", s.Table(), err)
	}
	return nil
}

// createAttempts bounds CreateTable's statements. One retry finds the table whenever the race
// is with creators of this same table; a third attempt covers one dropped in between.
const createAttempts = 3

// createRaced reports whether err is how CREATE TABLE IF NOT EXISTS fails when another session
// created the same name at once: a unique violation on the catalog (23505), or the table or
// its row type found to exist after the IF NOT EXISTS check (42P07, 42710).
func createRaced(err error) bool {
	switch sqlState(err) {
	case "23505", "42P07", "42710":
		return true
	}
	return false
}

// Check checks token against the newest token recorded for resource and
// records it, in one statement inside tx, the caller's transaction. Run it
// before your own write in the same transaction and commit both together
// (or use Update, which does that). It returns nil if token >= the recorded
// token (or none is recorded), a *StaleError (errors.Is(err, ErrStale)) if
// token is older, an error wrapping ErrInvalid for an empty resource, a
// token <= 0 or a nil tx, and the database error otherwise. After a
// *StaleError the transaction is still usable but should be rolled back.
//
// Check takes a Tx, which a *sql.DB and a *sql.Conn do not satisfy. Earlier
// versions took an Execer, and a check run on a *sql.DB committed on its
// own, apart from the write it guarded; code that passed a *sql.DB or
// *sql.Conn no longer compiles: begin a transaction and pass the *sql.Tx.
//
// The statement is a conditional upsert:
//
//	INSERT INTO fence_tokens AS f (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
//	WHERE f.token <= EXCLUDED.token
//
// and 0 rows affected means stale. Whether it inserts, updates or (WHERE
// false) does neither, the upsert leaves the resource's row locked (or, for
// a new resource, its uncommitted index entry) until the transaction ends,
// and a concurrent transaction's Check for the same resource waits for that
// lock. What the waiting Check then returns depends on its transaction's
// isolation level (see the package documentation, "Isolation levels"):
// under READ COMMITTED, PostgreSQL's default, it re-reads the newest
// committed token and its answer is final; under REPEATABLE READ and
// SERIALIZABLE it fails with a serialization failure (SQLSTATE 40001) if
// the other transaction committed, whatever its own token, newer or not.
// That failure is not a refusal: roll back and run the whole transaction
// again (IsSerializationFailure tells it apart). Either way a token older
// than one already committed never writes after it. The guarantee covers
// only data written in a transaction that passed Check (or that checks its
// own fence column, see CheckRows).
func (s *SQL) Check(ctx context.Context, tx Tx, resource string, token int64) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	if err := checkExecer(tx); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO `+s.Table()+` AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
WHERE f.token <= EXCLUDED.token`, resource, token)
	if err != nil {
		if sqlState(err) == "55P03" { // lock_not_available: the lock wait ran out
			return fmt.Errorf("fence: check token %d for resource %q: %w for longer than the lock wait: %w", token, resource, ErrBusy, err)
		}
		return fmt.Errorf("fence: check token %d for resource %q: %w", token, resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: check token %d for resource %q: rows affected: %w", token, resource, err)
	}
	if n > 0 {
		return nil
	}
	// Refused. The row is locked by us now, so this reads the token that
	// refused us.
	latest, err := s.Latest(ctx, tx, resource)
	if err != nil {
		latest = 0 // unknown; the refusal itself stands
	}
	return &StaleError{Resource: resource, Token: token, Latest: latest}
}

// Latest returns the newest token recorded for resource, or 0 if none is.
func (s *SQL) Latest(ctx context.Context, db Execer, resource string) (int64, error) {
	if resource == "" {
		return 0, fmt.Errorf("%w: empty resource", ErrInvalid)
	}
	if err := checkExecer(db); err != nil {
		return 0, err
	}
	var latest int64
	err := db.QueryRowContext(ctx, `SELECT token FROM `+s.Table()+` WHERE resource = $1`, resource).Scan(&latest)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: latest token for resource %q: %w", resource, err)
	}
	return latest, nil
}

// IsSerializationFailure reports whether err is PostgreSQL's serialization
// failure, SQLSTATE 40001, from a driver whose errors tell their SQLSTATE
// with a SQLState method (lib/pq, pgx). Under REPEATABLE READ and
// SERIALIZABLE, Check and Commit return it when a concurrent transaction got
// in first: run the whole transaction again, do not take it for a refusal.
func IsSerializationFailure(err error) bool { return sqlState(err) == "40001" }

// sqlState returns the SQLSTATE of a driver's error that tells it (lib/pq, pgx), or "".
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// Update runs write in a new transaction on db after Check has accepted
// token for resource, and commits. If Check refuses the token (a
// *StaleError), write is not called. If Check, write or the commit fails,
// the transaction is rolled back, so the token is recorded only if the
// write is committed, and the error is returned (write's error unchanged).
// write must use the tx it is given, not db, or its effects escape the
// guard. A nil db or write gives an error wrapping ErrInvalid. The
// transaction has the database's default isolation level; when that is
// REPEATABLE READ or SERIALIZABLE, call Update again when it returns an
// error for which IsSerializationFailure is true. WithBounds bounds how long the transaction
// can hold up other holders.
func (s *SQL) Update(ctx context.Context, db *sql.DB, resource string, token int64, write func(tx *sql.Tx) error) (err error) {
	if err := validate(resource, token); err != nil {
		return err
	}
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", ErrInvalid)
	}
	if write == nil {
		return fmt.Errorf("%w: nil write func for resource %q", ErrInvalid, resource)
	}
	if err := s.checkBounds(); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence: begin transaction: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // also on panic in write
		}
	}()
	if err := s.Bound(ctx, tx); err != nil {
		return err
	}
	if err := s.Check(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := write(tx); err != nil {
		return err
	}
	committed = true // whatever Commit returns, the tx is over
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence: commit token %d for resource %q: %w", token, resource, err)
	}
	return nil
}

// CheckRows turns the result of a fenced UPDATE on the caller's own row
// into a fencing error: 0 rows affected means the row's fence column
// already held a newer token (or the row does not exist), and CheckRows
// returns a *StaleError for resource and token with Latest 0 (unknown),
// which matches ErrStale. One or more rows affected returns nil. resource
// and token only label the error. A nil res gives an error wrapping
// ErrInvalid; an error from RowsAffected is returned wrapped.
//
// See the package documentation for the statement to write.
func CheckRows(res sql.Result, resource string, token int64) error {
	if res == nil {
		return fmt.Errorf("%w: nil sql.Result", ErrInvalid)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fence: rows affected for resource %q: %w", resource, err)
	}
	if n == 0 {
		return &StaleError{Resource: resource, Token: token}
	}
	return nil
}
