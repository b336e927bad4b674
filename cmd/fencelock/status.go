package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/driver"
)

func init() { commands = append(commands, newStatusCmd, newListCmd) }

// lockView is a lock as status, list and release --force show it, and a permit of a
// semaphore.
type lockView struct {
	// Kind is "lock" in list, which lists semaphores too; status leaves it out.
	Kind      string  `json:"kind,omitempty"`
	Name      string  `json:"name"`
	Held      bool    `json:"held"`
	Owner     string  `json:"owner,omitempty"`
	HoldCount int     `json:"hold_count,omitempty"`
	Token     int64   `json:"token,omitempty"`
	TTLLeft   float64 `json:"ttl_left_seconds,omitempty"`
	// Holder is what the holder published about itself: an object for fencelock run (host,
	// pid, command, since) or any other JSON, else the text as a JSON string.
	Holder json.RawMessage `json:"holder,omitempty"`
	// Weight is, for a permit, how many of the semaphore's permits it takes.
	Weight int `json:"weight,omitempty"`
}

func view(i fencelock.Info) lockView {
	v := lockView{Name: i.Name, Held: i.Held, Owner: i.Owner, HoldCount: i.Count, Token: i.Token, TTLLeft: i.Remaining.Seconds(), Weight: i.Weight}
	switch {
	case i.Meta == "":
	case json.Valid([]byte(i.Meta)):
		v.Holder = json.RawMessage(i.Meta)
	default:
		v.Holder, _ = json.Marshal(i.Meta)
	}
	return v
}

// holderText is the HOLDER column: "sleep, pid 8 on host since 2026-12-01T20:19:45Z" for what
// fencelock run published, the text itself for anything else.
func holderText(meta string) string {
	var h holderInfo
	if err := json.Unmarshal([]byte(meta), &h); err != nil || h.Command == "" {
		return meta
	}
	return fmt.Sprintf("%s, pid %d on %s since %s", h.Command, h.PID, h.Host, h.Since)
}

// semaphoreView is a semaphore as status --semaphore and list show it.
type semaphoreView struct {
	// Kind is "semaphore" in list, which lists locks too; status leaves it out.
	Kind    string     `json:"kind,omitempty"`
	Name    string     `json:"name"`
	Limit   int        `json:"limit"`  // 0 when no permit is held
	InUse   int        `json:"in_use"` // the permits the holders take
	Waiting int        `json:"waiting"`
	Token   int64      `json:"last_token,omitempty"`
	Permits []lockView `json:"permits"`
}

func semView(i fencelock.SemaphoreInfo) semaphoreView {
	v := semaphoreView{Name: i.Name, Limit: i.Limit, InUse: i.InUse, Waiting: i.Waiting, Token: i.Token, Permits: []lockView{}}
	for _, p := range i.Permits {
		v.Permits = append(v.Permits, view(p))
	}
	return v
}

// printSemaphore writes a line that says how many of the semaphore's permits are held and how
// many wait, then its permits as locks are shown. A read-write lock, the semaphore of
// fencelock.RWReaders permits, says whether a writer or how many readers hold it.
func printSemaphore(w io.Writer, i fencelock.SemaphoreInfo) {
	switch {
	case len(i.Permits) == 0:
		fmt.Fprintf(w, "semaphore %q: no permit held, %d waiting\n", i.Name, i.Waiting)
		return
	case i.Limit == fencelock.RWReaders && i.InUse == fencelock.RWReaders:
		fmt.Fprintf(w, "semaphore %q (a read-write lock): write-locked, %d waiting\n", i.Name, i.Waiting)
	case i.Limit == fencelock.RWReaders:
		readers := fmt.Sprintf("%d readers", i.InUse)
		if i.InUse == 1 {
			readers = "1 reader"
		}
		fmt.Fprintf(w, "semaphore %q (a read-write lock): read-locked by %s, %d waiting\n", i.Name, readers, i.Waiting)
	default:
		fmt.Fprintf(w, "semaphore %q: %d of %d permits held, %d waiting\n", i.Name, i.InUse, i.Limit, i.Waiting)
	}
	printLocks(w, i.Permits)
}

func newStatusCmd(g *globals) *cobra.Command {
	var semaphore bool
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show who holds a lock",
		Long: `Show whether the lock NAME is held, by which owner, how many holds it has, its fencing
token, how long its TTL has left, and what the holder published about itself (fencelock run
publishes its host, process ID, command and start time). For a free lock, the last token
issued where the backend still knows it.

With --semaphore, show the semaphore NAME instead (run -n): its limit, its waiters, and each
permit held, as a lock is shown.`,
		Example: `  fencelock status nightly-report
  fencelock status --json nightly-report | jq .token
  fencelock status --semaphore rebuild-index`,
		Args: exactArgs(1, "status needs a lock NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName(args[0]); err != nil {
				return err
			}
			st, err := openStore(g.backendURL())
			if err != nil {
				return err
			}
			defer st.close()
			if err := st.ping(cmd.Context()); err != nil {
				return err
			}
			if semaphore {
				return semaphoreStatus(cmd, g, st, args[0])
			}
			info, err := st.client().Inspect(cmd.Context(), args[0])
			if err != nil {
				return errorExit(err)
			}
			if g.json {
				return writeJSON(cmd.OutOrStdout(), view(info))
			}
			printLocks(cmd.OutOrStdout(), []fencelock.Info{info})
			return nil
		},
	}
	cmd.Flags().BoolVar(&semaphore, "semaphore", false, "show the semaphore NAME (run -n) instead of the lock")
	return cmd
}

func semaphoreStatus(cmd *cobra.Command, g *globals, st *store, name string) error {
	if _, ok := st.backend.(driver.Semaphores); !ok {
		return exitf(exitUsage, "the %s backend keeps no semaphores", st.kind)
	}
	// The limit is the holders' to say; Inspect only reads.
	info, err := st.client().Semaphore(name, 1).Inspect(cmd.Context())
	if err != nil {
		return errorExit(err)
	}
	info.Name = name
	if g.json {
		return writeJSON(cmd.OutOrStdout(), semView(info))
	}
	printSemaphore(cmd.OutOrStdout(), info)
	return nil
}

func printLocks(w io.Writer, infos []fencelock.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tOWNER\tHOLDS\tTOKEN\tTTL LEFT\tHOLDER")
	for _, i := range infos {
		state, ttl, holds := "free", "-", "-"
		if i.Held {
			state, holds = "held", fmt.Sprint(i.Count)
			if i.Remaining > 0 {
				ttl = i.Remaining.Round(time.Millisecond).String()
			}
		}
		owner := i.Owner
		if owner == "" {
			owner = "-"
		}
		token := "-"
		if i.Token != 0 {
			token = fmt.Sprint(i.Token)
		}
		holder := holderText(i.Meta)
		if holder == "" {
			holder = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.Name, state, owner, holds, token, ttl, holder)
	}
	_ = tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// exactArgs is cobra.ExactArgs with a message that says what to give.
func exactArgs(n int, msg string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return exitf(exitUsage, "%s (see %s --help)", msg, cmd.CommandPath())
		}
		return nil
	}
}
