package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

func newListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List the locks and semaphores held now",
		Long: `List the locks held now whose names start with PREFIX (all when it is omitted), then the
semaphores (run -n) and read-write locks under PREFIX with permits held or waiters in line:
each one's limit, the permits in use, the waiters, and each permit as a lock is shown (owner,
holds, token, TTL left, holder). A semaphore and a lock of the same name are unrelated; each is
listed on its own.

With --json, one array: the locks first, each with "kind": "lock", then the semaphores, each
with "kind": "semaphore", "name", "limit", "in_use", "waiting", "last_token" and "permits"
(each permit as a lock is, with its "weight"). A semaphore has no "held", "owner" or "token" of
its own, so a filter on those finds the locks alone, as select(.kind == "lock") does.

A backend that cannot name its semaphores lists its locks alone; fencelock status --semaphore
NAME shows one semaphore.`,
		Example: `  fencelock list
  fencelock list job: --json
  fencelock list --json | jq '.[] | select(.kind == "semaphore")'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			st, err := openStore(g.backendURL())
			if err != nil {
				return err
			}
			defer st.close()
			if err := st.ping(cmd.Context()); err != nil {
				return err
			}
			if _, ok := st.backend.(driver.Namer); !ok {
				return exitf(exitUsage, "the %s backend cannot list locks", st.kind)
			}
			l, err := list(cmd.Context(), st.client(), st.backend, prefix)
			if err != nil {
				return errorExit(err)
			}
			if g.json {
				return l.writeJSON(cmd.OutOrStdout())
			}
			l.writeText(cmd.OutOrStdout(), st.kind)
			return nil
		},
	}
}

// listing is what list shows.
type listing struct {
	locks []fencelock.Info
	sems  []fencelock.SemaphoreInfo
	// named says the backend names its semaphores: sems are all of them under the prefix.
	named bool
	// keeps says the backend keeps semaphores, named or not.
	keeps bool
}

// list reads the locks of b whose names start with prefix, and its semaphores when b names
// them, through c, c's Client over b, whose token base the tokens get. b is a driver.Namer.
func list(ctx context.Context, c *fencelock.Client, b fencelock.Backend, prefix string) (listing, error) {
	var l listing
	var err error
	if l.locks, err = c.List(ctx, prefix); err != nil {
		return l, err
	}
	_, l.keeps = b.(driver.Semaphores)
	_, l.named = b.(driver.SemaphoreNamer)
	if l.keeps && l.named {
		l.sems, err = c.ListSemaphores(ctx, prefix)
	}
	return l, err
}

// writeText writes the locks' table, then each semaphore, its line and its permits' table.
func (l listing) writeText(w io.Writer, kind string) {
	if len(l.locks) == 0 {
		fmt.Fprintln(w, "no locks held")
	} else {
		printLocks(w, l.locks)
	}
	switch {
	case !l.keeps:
	case !l.named:
		fmt.Fprintf(w, "the %s backend cannot list its semaphores: fencelock status --semaphore NAME shows one\n", kind)
	case len(l.sems) == 0:
		fmt.Fprintln(w, "no semaphores held")
	}
	for _, s := range l.sems {
		fmt.Fprintln(w)
		printSemaphore(w, s)
	}
}

// writeJSON writes one array, the locks first, then the semaphores: the output of list --json
// was an array of locks, and a script that reads it so still can.
func (l listing) writeJSON(w io.Writer) error {
	out := make([]any, 0, len(l.locks)+len(l.sems))
	for _, i := range l.locks {
		v := view(i)
		v.Kind = "lock"
		out = append(out, v)
	}
	for _, s := range l.sems {
		v := semView(s)
		v.Kind = "semaphore"
		out = append(out, v)
	}
	return writeJSON(w, out)
}
