package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
)

// supervisor runs the command under the lock until every process of it is gone: it passes
// signals on, keeps the terminal's foreground with the command, stops and continues with it,
// and ends it when the lock is lost. Only its loop's goroutine touches it.
type supervisor struct {
	ps        *processes
	lock      *fencelock.Lock
	tty       *terminal // nil when run has no controlling terminal
	gave      bool      // the command's group has the terminal
	killAfter time.Duration
	stderr    io.Writer

	status    syscall.WaitStatus // the command's, once exited
	lost      error
	kill      <-chan time.Time
	stopAsked bool // run got SIGTSTP and passed it on
}

// supervise starts c and returns once every process of it is gone.
func supervise(c command, lock *fencelock.Lock, killAfter time.Duration, sigs <-chan os.Signal, stderr io.Writer) outcome {
	jobs := make(chan os.Signal, 4)
	signal.Notify(jobs, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(jobs)
	s := &supervisor{lock: lock, tty: openTerminal(), killAfter: killAfter, stderr: stderr}
	defer s.tty.close()
	fg := -1
	if s.tty != nil && s.tty.foreground(s.tty.pgrp) {
		fg, s.gave = s.tty.fd(), true
	}
	ps, err := start(c, fg)
	if err != nil {
		if s.gave { // the child may have taken the terminal before its exec failed
			s.tty.give(s.tty.pgrp)
		}
		return outcome{started: exitf(exitNoExec, "starting %q: %v", c.argv[0], err)}
	}
	s.ps = ps
	return s.loop(sigs, jobs)
}

func (s *supervisor) loop(sigs, jobs <-chan os.Signal) outcome {
	done := s.lock.Context().Done()
	for {
		select {
		case ev, ok := <-s.ps.events:
			if !ok {
				if s.gave {
					s.tty.give(s.tty.pgrp)
				}
				return outcome{status: s.status, lost: s.lost, foreground: s.gave}
			}
			if ev.pid == s.ps.pid && ev.status.Stopped() {
				s.commandStopped()
			} else if ev.pid == s.ps.pid {
				s.status = ev.status
			}
		case sig := <-sigs:
			s.ps.signalGroup(sig.(syscall.Signal))
		case sig := <-jobs:
			if sig == syscall.SIGTSTP {
				s.stopAsked = true
				s.ps.signalGroup(syscall.SIGTSTP)
			} else {
				s.continued()
			}
		case <-done:
			done = nil
			s.lose()
		case <-s.kill:
			s.kill = nil
			s.ps.signalAll(syscall.SIGKILL)
		}
	}
}

// commandStopped follows the command into a stop (Ctrl-Z, SIGTTIN, SIGSTOP) when run is a job
// of a terminal, or was asked to stop itself: it gives the terminal back and stops its own
// process group, so that the shell sees its job stopped and takes the terminal. A stopped run
// does not renew the lock. Without a terminal, a command stopped by someone else stays under
// the lock, which run goes on renewing.
func (s *supervisor) commandStopped() {
	if s.tty == nil && !s.stopAsked {
		return
	}
	s.stopAsked = false
	if s.gave {
		s.tty.give(s.tty.pgrp)
		s.gave = false
	}
	fmt.Fprintf(s.stderr, "fencelock: the command stopped, and run stops too: lock %q is not renewed until they continue (valid until %s)\n",
		s.lock.Name(), s.lock.ValidUntil().Format("15:04:05.000"))
	if s.tty != nil {
		_ = syscall.Kill(0, syscall.SIGSTOP)
	} else {
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}

// continued passes a SIGCONT on to the command, with the terminal when run is its foreground
// job; if the lock was lost while they were stopped, the command is ended instead.
func (s *supervisor) continued() {
	s.foreground()
	if s.lock.Valid() != nil {
		s.lose()
		return
	}
	s.ps.signalGroup(syscall.SIGCONT)
}

// foreground gives the terminal to the command's group when run has it.
func (s *supervisor) foreground() {
	if s.tty != nil && !s.gave && s.tty.foreground(s.tty.pgrp) {
		s.tty.give(s.ps.pid)
		s.gave = true
	}
}

// lose ends the command's processes after the lock was lost: SIGTERM, and SIGCONT so that a
// stopped process runs its handler (as timeout(1) does), then SIGKILL after killAfter.
func (s *supervisor) lose() {
	if s.lost != nil {
		return
	}
	s.lost = s.lock.Valid()
	if s.lost == nil {
		s.lost = fencelock.ErrLost
	}
	fmt.Fprintf(s.stderr, "fencelock: lock %q lost: %s; sending SIGTERM to the command\n", s.lock.Name(), lossReason(s.lost))
	s.foreground()
	s.ps.signalAll(syscall.SIGTERM)
	s.ps.signalAll(syscall.SIGCONT)
	if s.killAfter > 0 {
		s.kill = time.After(s.killAfter)
	}
}
