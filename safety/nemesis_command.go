package safety

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// nemesisCommandEnv makes the test binary a command that `fencelock run` runs under the
// nemesis: its value is the command's kind (see runNemesisCommand).
const nemesisCommandEnv = "FENCELOCK_NEMESIS_COMMAND"

func init() {
	if kind := os.Getenv(nemesisCommandEnv); kind != "" {
		os.Exit(runNemesisCommand(kind))
	}
}

// runNemesisCommand is one command run under `fencelock run`. It writes to the store every
// 20ms for a while, stamped with FENCELOCK_TOKEN and its runner, in one of these ways:
//
//   - fork: starts a background writer (itself again, kind "writer") and writes beside it,
//     then waits for it, as `worker & ...; wait` does in a shell;
//   - tty: first reads a line from its standard input, the terminal;
//   - noterm: ignores SIGTERM, noting that it got one, and writes until it is killed;
//   - writer: the background writer of fork.
func runNemesisCommand(kind string) int {
	store, runner := os.Getenv("FENCELOCK_NEMESIS_STORE"), os.Getenv("FENCELOCK_NEMESIS_RUNNER")
	token, err := strconv.ParseInt(os.Getenv("FENCELOCK_TOKEN"), 10, 64)
	if err != nil || store == "" {
		fmt.Fprintln(os.Stderr, "nemesis command: FENCELOCK_TOKEN and FENCELOCK_NEMESIS_STORE must be set")
		return 2
	}
	var termed atomic.Bool
	if kind == "noterm" {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		go func() {
			<-sigs
			termed.Store(true)
		}()
	}
	var child *exec.Cmd
	switch kind {
	case "fork":
		child = exec.Command(os.Args[0], os.Args[1:]...)
		child.Env = append(os.Environ(), nemesisCommandEnv+"=writer")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "tty":
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "reading the terminal:", err)
			return 1
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	runnerID, _ := strconv.Atoi(runner)
	for end := time.Now().Add(time.Duration(200+rand.IntN(1300)) * time.Millisecond); time.Now().Before(end) || (kind == "noterm" && termed.Load()); {
		w := nemWrite{Name: os.Getenv("FENCELOCK_NAME"), Owner: "runner-" + runner, Worker: runnerID, Token: token, T0: time.Now().UnixNano(),
			Holder: fmt.Sprintf("%s/%d", kind, os.Getpid()), Termed: termed.Load()}
		var reply nemWriteReply
		_ = call(context.Background(), hc, store+"/write", w, &reply)
		time.Sleep(20 * time.Millisecond)
	}
	if child != nil {
		_ = child.Wait()
	}
	return 0
}
