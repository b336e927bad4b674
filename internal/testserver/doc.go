// Package testserver starts real Redis (standalone, Cluster, Sentinel) and
// PostgreSQL servers on free loopback ports, plus a fault-injecting TCP proxy,
// for fencelock's tests.
//
// A lock library's correctness depends on how real servers behave under
// crashes, pauses, failovers and partitions; fakes would only reproduce what
// their authors already expected. So the tests run the actual binaries (from
// the Debian packages redis-server, redis-tools and postgresql) and fail,
// naming the package to install, when one is missing. FENCELOCK_TEST_REDIS=valkey
// (FlavorEnv) runs valkey-server and valkey-cli instead of Redis's, from the
// packages valkey-server and valkey-tools (bookworm-backports on Debian 12).
//
// Every Start* function takes a testing.TB and registers a cleanup that stops
// the processes and removes their temporary directories. Every New* function
// is the same without a testing.TB (for TestMain) and needs an explicit Close.
// Child processes get SIGKILL when the test binary dies, so a crashed or
// killed test run leaves no servers behind.
package testserver
