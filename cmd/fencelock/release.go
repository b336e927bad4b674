package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fencelock/fencelock/driver"
)

func init() { commands = append(commands, newReleaseCmd) }

func newReleaseCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "release --force NAME",
		Short: "Remove a lock whoever holds it (an operator's escape hatch)",
		Long: `Remove the lock NAME whoever holds it, and say what was removed. The holder learns at its
next renewal that it lost the lock; the fencing token of the next holder is still greater, so a
store that checks tokens refuses the old holder's late writes. Refuses without --force.`,
		Example: `  fencelock release --force nightly-report`,
		Args:    exactArgs(1, "release needs a lock NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkName(args[0]); err != nil {
				return err
			}
			if !force {
				return exitf(exitUsage, "release removes a lock someone else may hold; say --force to do it")
			}
			st, err := openStore(g.backendURL())
			if err != nil {
				return err
			}
			defer st.close()
			if err := st.ping(cmd.Context()); err != nil {
				return err
			}
			fr, ok := st.backend.(driver.ForceReleaser)
			if !ok {
				return exitf(exitUsage, "the %s backend cannot force a release", st.kind)
			}
			info, err := fr.ForceRelease(cmd.Context(), args[0])
			if err != nil {
				return errorExit(err)
			}
			if g.json {
				return writeJSON(cmd.OutOrStdout(), struct {
					Removed bool     `json:"removed"`
					Lock    lockView `json:"lock"`
				}{info.Held, view(info)})
			}
			if !info.Held {
				fmt.Fprintf(cmd.OutOrStdout(), "%s was not held: nothing removed\n", args[0])
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s: owner %s, %d hold(s), token %d\n", info.Name, info.Owner, info.Count, info.Token)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really remove the lock")
	return cmd
}
