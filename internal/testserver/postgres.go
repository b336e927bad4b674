package testserver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PostgresUser is the superuser initdb creates; it needs no password.
const PostgresUser = "fencelock"

// Postgres is a throwaway PostgreSQL cluster on 127.0.0.1. This package starts it without a
// PostgreSQL driver (see pgSession), so the root module needs none; a test opens its own
// database/sql handle on DSN or URL with the driver its own module requires.
type Postgres struct {
	// DSN is in lib/pq key=value form; database "postgres", no TLS.
	DSN     string
	Port    int
	Dir     string // temp root: holds data/ and postgres.log
	DataDir string

	proc *process

	mu     sync.Mutex
	closed bool
}

// StartPostgres initialises and starts a PostgreSQL cluster and stops it when
// the test ends.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	p, err := NewPostgres()
	if err != nil {
		t.Fatalf("%v", err)
	}
	cleanupOnEnd(t, p.Close, p.proc)
	return p
}

// NewPostgres is StartPostgres without a testing.TB; the caller must Close it.
func NewPostgres() (*Postgres, error) {
	binDir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencelock-pg-*")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	p := &Postgres{Dir: dir, DataDir: filepath.Join(dir, "data")}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	if err := preparePostgresDirs(dir, p.DataDir, cred); err != nil {
		return nil, err
	}
	if err := initdb(binDir, p.DataDir, dir, cred); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		retry, err := p.tryStart(binDir, cred)
		if err == nil {
			ok = true
			return p, nil
		}
		lastErr = err
		if !retry {
			break
		}
	}
	return nil, lastErr
}

// postgresBinDir picks the newest /usr/lib/postgresql/<version>/bin (Debian
// keeps server binaries out of PATH), falling back to PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "postgres")) && isExecutable(filepath.Join(d, "initdb")) {
			found = append(found, d)
		}
	}
	if len(found) > 0 {
		version := func(d string) float64 {
			v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
			return v
		}
		sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
		return found[0], nil
	}
	pg, err1 := exec.LookPath("postgres")
	initdb, err2 := exec.LookPath("initdb")
	if err1 == nil && err2 == nil && filepath.Dir(pg) == filepath.Dir(initdb) {
		return filepath.Dir(pg), nil
	}
	return "", errors.New("testserver: PostgreSQL server binaries (postgres, initdb) not found in /usr/lib/postgresql/*/bin or PATH: install the Debian package postgresql (apt-get install postgresql)")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// postgresCredential returns the identity to run PostgreSQL as: postgres
// refuses to run as root, so root switches to the "postgres" user created by
// the Debian package. Switching through SysProcAttr.Credential instead of
// runuser keeps the server a direct child, so Pdeathsig and stop signals reach
// it rather than a runuser wrapper.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testserver: running as root, PostgreSQL must run as user \"postgres\", which does not exist (%v): install the Debian package postgresql (apt-get install postgresql)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testserver: user postgres has non-numeric uid/gid %s/%s", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// preparePostgresDirs creates the data dir owned by the server's user inside a
// root dir it can traverse (MkdirTemp makes 0700 dirs).
func preparePostgresDirs(root, data string, cred *syscall.Credential) error {
	if err := os.Mkdir(data, 0o700); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	if cred == nil {
		return nil
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	// Every ancestor must be searchable by the postgres user too; a private
	// TMPDIR (e.g. under /root) would otherwise fail with a confusing error.
	for d := filepath.Dir(root); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("testserver: %s is not searchable by user postgres; set TMPDIR to a world-searchable directory such as /tmp", d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func initdb(binDir, data, logDir string, cred *syscall.Credential) error {
	cmd := exec.Command(filepath.Join(binDir, "initdb"),
		"-D", data,
		"-A", "trust",
		"-U", PostgresUser,
		"-E", "UTF8",
		"--no-locale", // independent of the host's installed locales
		"--no-sync",
		"--no-instructions",
	)
	// The caller's working directory may not be readable by user postgres.
	cmd.Dir = data
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := runSpawned(cmd)
	if err != nil {
		_ = os.WriteFile(filepath.Join(logDir, "initdb.log"), out, 0o644)
		return fmt.Errorf("testserver: initdb: %v\n%s", err, out)
	}
	return nil
}

func (p *Postgres) tryStart(binDir string, cred *syscall.Credential) (retry bool, err error) {
	port, err := FreePort()
	if err != nil {
		return false, err
	}
	outPath := filepath.Join(p.Dir, "postgres.log")
	os.Remove(outPath) // so portInUse sees only this attempt
	p.Port = port
	p.DSN = fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=postgres sslmode=disable", port, PostgresUser)
	p.proc = &process{
		name: fmt.Sprintf("postgres 127.0.0.1:%d", port),
		bin:  filepath.Join(binDir, "postgres"),
		args: []string{
			"-D", p.DataDir,
			"-p", strconv.Itoa(port),
			"-k", p.DataDir, // unix socket in a dir we own, not /var/run/postgresql
			"-c", "listen_addresses=127.0.0.1",
			"-F", "-c", "fsync=off", // durability is irrelevant to throwaway data
		},
		workDir: p.DataDir,
		outPath: outPath,
		// SIGINT is PostgreSQL's "fast" shutdown; SIGTERM would wait for
		// clients (pooled connections) to disconnect.
		stopSig: syscall.SIGINT,
		cred:    cred,
	}
	if err := p.proc.start(); err != nil {
		return false, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	err = p.proc.waitReady(context.Background(), func(ctx context.Context) error {
		c, err := pgSession(ctx, addr)
		if err != nil {
			return err
		}
		return pgTerminate(c)
	})
	if err != nil {
		_ = p.proc.kill()
		return p.proc.portInUse(), err
	}
	return false, nil
}

// PID is the process id of the postmaster, 0 if never started.
func (p *Postgres) PID() int {
	return p.proc.pid()
}

// URL is the DSN in postgres:// form, for drivers that only take URLs.
func (p *Postgres) URL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", PostgresUser, p.Port)
}

// Close stops the server (fast shutdown, SIGKILL after 5s) and removes its
// directory. It is idempotent.
func (p *Postgres) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	err := p.proc.stop()
	return errors.Join(err, os.RemoveAll(p.Dir))
}

// LogTail returns the last lines of the server log, for debugging.
func (p *Postgres) LogTail() string {
	return strings.TrimSpace(p.proc.logTail())
}

// pgSession opens a session as PostgresUser on database postgres the way a client does, up to
// the server's ReadyForQuery, speaking just enough of the PostgreSQL protocol (3.0) to do it,
// as pingRESP does for Redis: a server still starting refuses the session (SQLSTATE 57P03),
// and one that accepts it takes queries. The caller ends the session with pgTerminate.
func pgSession(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	params := "user\x00" + PostgresUser + "\x00database\x00postgres\x00\x00"
	startup := binary.BigEndian.AppendUint32(nil, uint32(8+len(params)))
	startup = binary.BigEndian.AppendUint32(startup, 3<<16) // protocol 3.0
	if _, err := c.Write(append(startup, params...)); err != nil {
		c.Close()
		return nil, err
	}
	if err := pgAwaitReady(bufio.NewReader(c)); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// pgAwaitReady reads the server's messages after a startup message until ReadyForQuery.
func pgAwaitReady(r *bufio.Reader) error {
	for {
		var head [5]byte // the type, then a length that counts itself
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(head[1:])
		if n < 4 || n > 1<<20 {
			return fmt.Errorf("postgres sent a %q message of length %d", head[0], n)
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch head[0] {
		case 'Z': // ReadyForQuery
			return nil
		case 'R': // an authentication request; 0 is AuthenticationOk, all that trust sends
			if len(body) < 4 || binary.BigEndian.Uint32(body) != 0 {
				return fmt.Errorf("postgres asks for authentication (request % x), which initdb -A trust should have turned off", body)
			}
		case 'E': // ErrorResponse: fields of a type byte and a string each
			fields := map[byte]string{}
			for _, f := range strings.Split(string(body), "\x00") {
				if f != "" {
					fields[f[0]] = f[1:]
				}
			}
			return fmt.Errorf("postgres: %s (SQLSTATE %s)", fields['M'], fields['C'])
		}
		// ParameterStatus, BackendKeyData and notices say nothing about readiness.
	}
}

// pgTerminate ends a session politely (Terminate) and closes its connection.
func pgTerminate(c net.Conn) error {
	_, err := c.Write([]byte{'X', 0, 0, 0, 4})
	return errors.Join(err, c.Close())
}
