package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/etcdbackend"
	"github.com/fencelock/fencelock/redisbackend"
	"github.com/fencelock/fencelock/redlock"
	"github.com/fencelock/fencelock/zkbackend"
)

const defaultBackend = "redis://127.0.0.1:6379"

// store is an opened backend and what it was opened from.
type store struct {
	backend  fencelock.Backend
	kind     string // redis, redis+sentinel, redis+cluster, etcd, zk
	redis    redis.UniversalClient
	etcd     *clientv3.Client
	zk       *zk.Conn
	nodes    []*redis.Client // Redlock's independent servers
	url      string          // redacted
	close    func() error
	password string // of a redis:// URL, to tell a server that wants none
	// tokenBase is the URL's token_base: added to every token the Client hands out (see
	// fencelock.WithTokenBase), for names moved to this backend from another.
	tokenBase int64
}

// client returns a Client over the store's backend, with its token base.
func (s *store) client(opts ...fencelock.ClientOption) *fencelock.Client {
	return fencelock.New(s.backend, append([]fencelock.ClientOption{fencelock.WithTokenBase(s.tokenBase)}, opts...)...)
}

// openStore connects to the backend named by raw. Errors never contain the credentials.
func openStore(raw string) (*store, error) {
	if !strings.Contains(raw, "://") {
		hint := "redis://HOST:PORT"
		if raw != "" && !strings.Contains(raw, "@") {
			hint = "redis://" + raw
		}
		return nil, exitf(exitUsage, "backend URL %q has no scheme: write %s (or redis+sentinel://, redis+cluster://, redlock://, etcd://, zk://)", redactRaw(raw), hint)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, exitf(exitUsage, "backend URL %q: %v", redactRaw(raw), errors.Unwrap(err))
	}
	s := &store{kind: u.Scheme, url: redact(u)}
	if u.Host == "" {
		s.url = redactRaw(raw) // a URL without a host prints as "etcd:", which reads as a typo
	}
	// token_base is fencelock's, on every scheme: taken out before the store's own parser,
	// which refuses what it does not know, reads the URL.
	if q := u.Query(); q.Has("token_base") {
		v := q.Get("token_base")
		if s.tokenBase, err = strconv.ParseInt(v, 10, 64); err != nil || s.tokenBase < 0 || s.tokenBase > fencelock.MaxTokenBase {
			return nil, exitf(exitUsage, "backend URL %s: token_base %q: want a whole number from 0 to %d", s.url, v, int64(fencelock.MaxTokenBase))
		}
		q.Del("token_base")
		u.RawQuery = q.Encode()
		raw = u.String()
	}
	if err := checkPorts(u.Host); err != nil {
		return nil, exitf(exitUsage, "backend URL %s: %v", s.url, err)
	}
	switch u.Scheme {
	case "redis", "rediss":
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return nil, exitf(exitUsage, "backend URL %s: %v", s.url, err)
		}
		opts.ContextTimeoutEnabled = true
		if opts.ClientName == "" {
			// So that CLIENT LIST tells an operator which process a connection is.
			opts.ClientName = "fencelock-" + strconv.Itoa(os.Getpid())
		}
		c := redis.NewClient(opts)
		s.useRedis(c)
		s.password = opts.Password
	case "redis+sentinel":
		hosts, rest := u.Host, strings.Trim(u.Path, "/")
		parts := strings.Split(rest, "/")
		if hosts == "" || parts[0] == "" {
			return nil, exitf(exitUsage, "backend URL %s: want redis+sentinel://host:port[,host:port]/master[/db]", s.url)
		}
		db := 0
		if len(parts) > 1 {
			if db, err = strconv.Atoi(parts[1]); err != nil {
				return nil, exitf(exitUsage, "backend URL %s: database %q is not a number", s.url, parts[1])
			}
		}
		pass, _ := u.User.Password()
		if pass == "" && u.User != nil {
			pass = u.User.Username()
		}
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: parts[0], SentinelAddrs: strings.Split(hosts, ","), Password: pass, DB: db,
			ContextTimeoutEnabled: true,
		})
		s.useRedis(c)
	case "redis+cluster":
		if u.Host == "" {
			return nil, exitf(exitUsage, "backend URL %s: want redis+cluster://host:port[,host:port]", s.url)
		}
		pass, _ := u.User.Password()
		if pass == "" && u.User != nil {
			pass = u.User.Username() // redis+cluster://PASSWORD@host:port, as the help writes it
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(u.Host, ","), Password: pass, ContextTimeoutEnabled: true})
		s.useRedis(c)
	case "etcd", "etcds":
		if u.Host == "" {
			return nil, exitf(exitUsage, "backend URL %s: want etcd://host:port[,host:port]", s.url)
		}
		cfg := clientv3.Config{Endpoints: strings.Split(u.Host, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
		if u.User != nil {
			cfg.Username = u.User.Username()
			cfg.Password, _ = u.User.Password()
		}
		if u.Scheme == "etcds" {
			cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			return nil, exitf(exitFailure, "backend %s: %v", s.url, err)
		}
		b := etcdbackend.New(c)
		s.etcd, s.backend = c, b
		s.close = func() error { return errors.Join(b.Close(), c.Close()) }
	case "zk":
		if u.Host == "" {
			return nil, exitf(exitUsage, "backend URL %s: want zk://host:port[,host:port][/root]", s.url)
		}
		timeout := 10 * time.Second
		if v := u.Query().Get("session_timeout"); v != "" {
			if timeout, err = time.ParseDuration(v); err != nil || timeout <= 0 {
				return nil, exitf(exitUsage, "backend URL %s: session_timeout %q is not a positive duration", s.url, v)
			}
		}
		conn, events, err := zk.Connect(strings.Split(u.Host, ","), timeout, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
		if err != nil {
			return nil, exitf(exitFailure, "backend %s: %v", s.url, err)
		}
		go func() {
			for range events { // drained until the connection closes
			}
		}()
		opts := []zkbackend.Option{zkbackend.WithSessionTimeout(timeout)}
		if root := strings.TrimRight(u.Path, "/"); root != "" {
			opts = append(opts, zkbackend.WithRoot(root))
		}
		zb := zkbackend.New(conn, opts...)
		s.zk, s.backend = conn, zb
		// The Backend first finishes what it owes (a release cut short by a disconnect).
		s.close = func() error { err := zb.Close(); conn.Close(); return err }
	case "redlock":
		if u.Host == "" {
			return nil, exitf(exitUsage, "backend URL %s: want redlock://host:port,host:port,host:port (an odd number, at least 3)", s.url)
		}
		pass, _ := u.User.Password()
		var clients []redisbackend.Client
		for _, addr := range strings.Split(u.Host, ",") {
			c := redis.NewClient(&redis.Options{Addr: addr, Password: pass, ContextTimeoutEnabled: true})
			s.nodes = append(s.nodes, c)
			clients = append(clients, c)
		}
		b := redlock.New(clients)
		s.backend = b
		s.close = func() error {
			errs := []error{b.Close()}
			for _, c := range s.nodes {
				errs = append(errs, c.Close())
			}
			return errors.Join(errs...)
		}
	case "":
		return nil, exitf(exitUsage, "backend URL %q has no scheme: want redis://, redis+sentinel://, redis+cluster://, redlock://, etcd:// or zk://", redactRaw(raw))
	default:
		return nil, exitf(exitUsage, "backend URL %s: unknown scheme %q: want redis://, rediss://, redis+sentinel://, redis+cluster://, redlock://, etcd:// or zk://", s.url, u.Scheme)
	}
	return s, nil
}

// ping checks that the backend answers, so that a wrong address fails with one clear line.
func (s *store) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	switch {
	case s.redis != nil:
		err = s.redis.Ping(ctx).Err()
	case s.etcd != nil:
		// The etcd client waits out its deadline on a refused dial and then says only
		// "context deadline exceeded": an endpoint that takes no connection says why at once.
		if err = dialAny(ctx, s.etcd.Endpoints()); err == nil {
			_, err = s.etcd.Get(ctx, "fencelock-ping", clientv3.WithCountOnly())
		}
	case s.zk != nil:
		err = pingZK(ctx, s.zk)
	case len(s.nodes) > 0:
		// Redlock works with a majority: fail only when fewer answer.
		var errs []error
		for _, c := range s.nodes {
			if e := c.Ping(ctx).Err(); e != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c.Options().Addr, e))
			}
		}
		if len(errs) > len(s.nodes)/2 {
			err = errors.Join(errs...)
		}
	}
	if err != nil {
		return s.pingFailed(err)
	}
	if s.password != "" && s.redis != nil {
		// go-redis logs in without a word when the server has no password to check.
		if err := s.redis.Do(ctx, "AUTH", s.password).Err(); err != nil && strings.Contains(err.Error(), "without any password configured") {
			fmt.Fprintf(os.Stderr, "fencelock: warning: backend %s needs no password, but the URL has one: is it the server you meant?\n", s.url)
		}
	}
	return nil
}

// dialAny returns nil when one of endpoints (host:port, or a URL of one) takes a TCP
// connection, else the dial errors.
func dialAny(ctx context.Context, endpoints []string) error {
	var errs []error
	for _, ep := range endpoints {
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			ep = u.Host
		}
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", ep)
		if err == nil {
			_ = c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkPorts says which port of a URL's hosts (host:port, comma-separated) is no port number.
func checkPorts(hosts string) error {
	for _, h := range strings.Split(hosts, ",") {
		_, port, err := net.SplitHostPort(h)
		if err != nil {
			continue // no port: the scheme's default
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q of %s is not a port number: want 1 to 65535", port, h)
		}
	}
	return nil
}

// pingFailed is ping's error: a server that answered with a refusal the URL can fix is bad
// input; anything else is a backend that does not answer.
func (s *store) pingFailed(err error) error {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	switch {
	case strings.Contains(msg, "NOAUTH"):
		return exitf(exitUsage, "backend %s: authentication failed, the server wants a password (%s): put it in the URL, as redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port for an ACL user", s.url, msg)
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
		return exitf(exitUsage, "backend %s: authentication failed (%s): check the user and password in the URL (redis://USER:PASSWORD@host:port)", s.url, msg)
	case strings.Contains(msg, "DB index is out of range"):
		return exitf(exitUsage, "backend %s: no such database (%s): the number after the address must be below the server's databases setting (16 unless configured)", s.url, msg)
	}
	return exitf(exitFailure, "backend %s does not answer: %s", s.url, msg)
}

// useRedis makes c the store's client and a Backend over it. Closing the store closes the
// Backend first, which waits for its clean-up in the background (a waiter's leaving the line),
// then the client under it.
func (s *store) useRedis(c redis.UniversalClient) {
	b := redisbackend.New(c)
	s.redis, s.backend = c, b
	s.close = func() error {
		_ = b.Close()
		return c.Close()
	}
}

// pingZK waits for the ZooKeeper connection to have a session, within ctx.
func pingZK(ctx context.Context, c *zk.Conn) error {
	for c.State() != zk.StateHasSession {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no session: %v", c.State())
		case <-time.After(10 * time.Millisecond):
		}
	}
	_, _, err := c.Exists("/")
	return err
}

// zkQuiet keeps go-zookeeper from logging reconnections: fencelock reports errors itself.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// redact hides the password of a URL.
func redact(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	if _, ok := u.User.Password(); ok {
		c.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		c.User = url.User("xxxxx") // a lone user part is a password in redis+sentinel URLs
	}
	return c.String()
}

// redactRaw hides everything between "//" and "@" of a URL that did not parse.
func redactRaw(raw string) string {
	if i := strings.Index(raw, "//"); i >= 0 {
		if j := strings.LastIndex(raw, "@"); j > i {
			return raw[:i+2] + "xxxxx" + raw[j:]
		}
	}
	return raw
}

// errorExit maps a library error to an exit code.
func errorExit(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencelock.ErrInvalid):
		return &exitError{code: exitUsage, err: err}
	case errors.Is(err, fencelock.ErrNotObtained):
		return &exitError{code: exitConflict, err: err}
	case errors.Is(err, fencelock.ErrLost):
		return &exitError{code: exitLost, err: err}
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("%w", err)}
}
