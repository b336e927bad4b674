package main

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newEtcdCmd) }

func newEtcdCmd(g *globals) *cobra.Command {
	var listen, dir string
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run a single-member etcd in this process, on loopback, for development",
		Long: `Run a real etcd (the etcd server's own code, one member) inside this process until it is
interrupted, serving clients on --listen, a loopback address, and print its backend URL. It is
for trying fencelock's etcd backend on one machine: Debian packages no etcd, and the demo's is
gone when the demo ends. Its data lives in --data-dir, or in a temporary directory removed at
exit. Production wants an etcd cluster of three or five members on machines of their own.`,
		Example: `  fencelock etcd &
  FENCELOCK_BACKEND=etcd://127.0.0.1:2379 fencelock run nightly-report -- ./report.sh`,
		Args: exactArgs(0, "etcd takes no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return exitf(exitUsage, "--listen %q: want host:port", listen)
			}
			if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
				return exitf(exitUsage, "--listen %q: want a loopback address (127.0.0.1 or [::1]): this etcd is for development on this machine", listen)
			}
			e, err := serveEtcd(listen, dir)
			if err != nil {
				return exitf(exitFailure, "%v", err)
			}
			defer e.close()
			fmt.Fprintln(cmd.OutOrStdout(), e.url)
			<-cmd.Context().Done() // an interrupt or SIGTERM
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:2379", "the loopback host:port to serve clients on")
	cmd.Flags().StringVar(&dir, "data-dir", "", "where to keep its data (default: a temporary directory, removed at exit)")
	return cmd
}
