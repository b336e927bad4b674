package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fencelock"
)

func init() { commands = append(commands, newDemoWorkerCmd) }

// The demo's modes.
const (
	modeNoLock = "no-lock"
	modeLock   = "lock"
	modePaused = "lock-paused"
	modeFenced = "lock-fenced"
)

// demoLockName is the lock the demo's workers take: the product's stock.
const demoLockName = "demo:stock:sku-1"

// newDemoWorkerCmd is one worker process of the demo, started by `fencelock demo`.
func newDemoWorkerCmd(g *globals) *cobra.Command {
	var store, mode string
	var ttl, work time.Duration
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := &demoWorker{store: store, http: &http.Client{Timeout: time.Minute}, work: work}
			var locker *fencelock.Client
			if mode != modeNoLock {
				st, err := openStore(g.backendURL())
				if err != nil {
					return err
				}
				defer st.close()
				locker = st.client()
				defer locker.Close()
			}
			return w.loop(cmd.Context(), locker, ttl)
		},
	}
	cmd.Flags().StringVar(&store, "store", "", "store URL")
	cmd.Flags().StringVar(&mode, "mode", modeNoLock, "demo mode")
	cmd.Flags().DurationVar(&ttl, "ttl", 2*time.Second, "lock TTL")
	cmd.Flags().DurationVar(&work, "work", 2*time.Millisecond, "time between reading the stock and writing it")
	return cmd
}

type demoWorker struct {
	store string
	http  *http.Client
	work  time.Duration
}

func (w *demoWorker) loop(ctx context.Context, locker *fencelock.Client, ttl time.Duration) error {
	for {
		var order orderReply
		if err := w.call(ctx, "/order", nil, &order); err != nil {
			return err
		}
		if order.Done {
			return nil
		}
		if locker == nil {
			if err := w.sell(ctx, 0); err != nil {
				return err
			}
			continue
		}
		lock, err := locker.Obtain(ctx, demoLockName, fencelock.WithTTL(ttl))
		if err != nil {
			return exitf(exitFailure, "worker %d: %v", os.Getpid(), err)
		}
		err = w.sell(ctx, lock.Token())
		_ = lock.Release(context.WithoutCancel(ctx)) // fails after a pause: the lock was lost
		if err != nil {
			return err
		}
	}
}

// sell reads the stock and, if there is any, writes it back one lower: the read-modify-write
// that two holders at once turn into an oversell.
func (w *demoWorker) sell(ctx context.Context, token int64) error {
	var stock readReply
	if err := w.call(ctx, "/read", nil, &stock); err != nil {
		return err
	}
	if stock.Stock <= 0 {
		return nil // sold out
	}
	time.Sleep(w.work)
	var reply writeReply
	return w.call(ctx, "/write", writeRequest{PID: os.Getpid(), Token: token, Stock: stock.Stock - 1, Version: stock.Version}, &reply)
}

func (w *demoWorker) call(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.store+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return exitf(exitFailure, "store: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return exitf(exitFailure, "store: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("store reply: %w", err)
	}
	return nil
}
