package testserver

import (
	"errors"
	"fmt"
	"os"
)

// FlavorEnv names the environment variable that chooses the server behind every Redis, Cluster
// and Sentinel this package starts: "redis" (the default) or "valkey". Valkey forked from Redis
// 7.2 and takes the same arguments, configuration and protocol, so one code path starts either;
// running the backends' suites against both is how the tests learn where they differ.
const FlavorEnv = "FENCELOCK_TEST_REDIS"

// ErrNotInstalled is matched by the error of a start whose server binary is missing, so that a
// test that wants one flavor in particular can skip where it is not installed.
var ErrNotInstalled = errors.New("testserver: not installed")

// flavor is one family of Redis-protocol server binaries, with the Debian packages they come in.
type flavor struct {
	server    string // also runs the sentinels, with --sentinel
	serverPkg string
	cli       string // creates clusters
	cliPkg    string
	// suite is the Debian suite the packages come from when it is not the release itself.
	suite string
}

var flavors = map[string]flavor{
	"redis": {server: "redis-server", serverPkg: "redis-server",
		cli: "redis-cli", cliPkg: "redis-tools"},
	"valkey": {server: "valkey-server", serverPkg: "valkey-server",
		cli: "valkey-cli", cliPkg: "valkey-tools", suite: "bookworm-backports"},
}

// currentFlavor reads FlavorEnv at each start, so a test can choose a flavor with t.Setenv.
func currentFlavor() (flavor, error) {
	v := os.Getenv(FlavorEnv)
	if v == "" {
		v = "redis"
	}
	f, ok := flavors[v]
	if !ok {
		return flavor{}, fmt.Errorf("testserver: %s=%q: want redis or valkey", FlavorEnv, v)
	}
	return f, nil
}

// serverBinary is the path of f's server.
func (f flavor) serverBinary() (string, error) { return f.look(f.server, f.serverPkg) }

// cliBinary is the path of f's command-line client.
func (f flavor) cliBinary() (string, error) { return f.look(f.cli, f.cliPkg) }

func (f flavor) look(name, debianPkg string) (string, error) {
	p, err := lookBinary(name, debianPkg)
	if err != nil && f.suite != "" {
		err = fmt.Errorf("%w; Debian 12 has it in %s (apt-get install -t %s %s), which scripts/test adds", err, f.suite, f.suite, debianPkg)
	}
	return p, err
}
