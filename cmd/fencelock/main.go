// Command fencelock runs programs under cluster-wide locks, inspects and audits locks, and
// shows the oversell story the locks exist for.
//
//	fencelock run nightly-report -- ./report.sh
//	fencelock status nightly-report
//	fencelock demo
//
// See `fencelock --help` and `fencelock COMMAND --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	redis.SetLogger(quietLogger{})
	os.Exit(execute(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command line and returns the process's exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	code, shown := exitUsage, err // cobra's own errors: unknown command or flag, wrong arguments
	var ex *exitError
	if errors.As(err, &ex) {
		code, shown = ex.code, ex.err
	}
	if shown != nil {
		if f := root.PersistentFlags().Lookup("json"); f != nil && f.Value.String() == "true" {
			// A script that asked for JSON gets its error as JSON too, on stdout.
			_ = writeJSON(stdout, struct {
				Error    string `json:"error"`
				ExitCode int    `json:"exit_code"`
			}{errorLine(shown), code})
		} else {
			fmt.Fprintln(stderr, "fencelock:", errorLine(shown))
		}
	}
	return code
}

// errorLine is err as one line, without the command's prefix.
func errorLine(err error) string {
	msg := strings.TrimPrefix(err.Error(), "fencelock: ")
	return strings.ReplaceAll(msg, "\n", "; ")
}

// quietLogger keeps go-redis from logging its retries: fencelock reports errors itself.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// globals are the flags every command shares.
type globals struct {
	backend string
	json    bool
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "fencelock",
		Short: "Distributed locks with fencing tokens, from the command line",
		Long: `fencelock runs programs under cluster-wide locks, inspects and audits locks, and shows
the oversell story distributed locks exist for.

The backend comes from --backend or FENCELOCK_BACKEND (default ` + defaultBackend + `):

  redis://[user:password@]host:port[/db]              one Redis server
  rediss://...                                         the same over TLS
  redis+sentinel://[password@]host:port[,host:port]/master[/db]
  redis+cluster://[password@]host:port[,host:port]
  redlock://[:password@]host:port,host:port,host:port   independent servers, an odd number
  etcd://host:port[,host:port]
  zk://host:port[,host:port][/root][?session_timeout=10s]

Any of them may carry token_base=N in its query (?token_base=N, or &token_base=N after
another): N is added to every fencing token, for names moved to this backend from another
whose tokens were greater (see "Moving to another backend" in the README).`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.backend, "backend", "", "backend URL (default $FENCELOCK_BACKEND, then "+defaultBackend+")")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print JSON for scripts")
	for _, add := range commands {
		root.AddCommand(add(g))
	}
	return root
}

// commands are the subcommands; each file adds its own from an init function.
var commands []func(*globals) *cobra.Command

// backendURL is the backend the user asked for.
func (g *globals) backendURL() string {
	if g.backend != "" {
		return g.backend
	}
	if env := os.Getenv("FENCELOCK_BACKEND"); env != "" {
		return env
	}
	return defaultBackend
}
