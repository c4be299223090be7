// Self-update in bcd node: the Updater of [update] (bcd's own slots, or bcd
// helper's over its socket), and the exec of the new binary (or of the
// previous one after a rollback), which main runs last, after every
// deferred cleanup, with the same arguments and environment.

package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"bcd/internal/agent"
	"bcd/internal/atexit"
	"bcd/internal/config"
	"bcd/internal/helper"
	"bcd/internal/update"
)

// pendingExec is what main executes before it exits (set by bcd node).
var pendingExec struct {
	path  string
	store update.Store
}

// newUpdater builds bcd node's Updater (nil without [update]). A bcd that
// is not behind an entrypoint refuses daemon.upgrade (update-not-installed)
// but runs.
func newUpdater(c *config.Config, getenv func(string) string, log *slog.Logger) (*update.Updater, error) {
	uc, err := update.ParseConfig(c.Update)
	if err != nil || uc == nil {
		return nil, err
	}
	policy, err := uc.Policy()
	if err != nil {
		return nil, err
	}
	staged := uc.StagedPath(c.DataDir)
	var store update.Store
	if uc.HelperSocket != "" {
		store = &helper.Client{Socket: uc.HelperSocket}
	} else if dir, err := uc.SlotsDir(""); err != nil {
		log.Warn("update.not_installed", "err", err)
		store = update.NotInstalled{Err: err}
	} else {
		store = &update.Slots{Dir: dir, Staged: staged, StagedUID: uint32(os.Geteuid()), Policy: policy, Log: log}
	}
	timeout := updateKnobs(getenv, log)
	return &update.Updater{Store: store, Policy: policy, Staged: staged, Version: version, ConfirmTimeout: timeout, Log: log}, nil
}

// requestExec is the agent's Exec: main executes path last.
func requestExec(store update.Store) func(string) error {
	return func(path string) error {
		pendingExec.path, pendingExec.store = path, store
		return nil
	}
}

// execIfRequested replaces the process with the requested binary (after
// the exit cleanups, atexit); it
// returns (the exit code) only when that fails, after pointing the
// entrypoint at the previous slot again so that the supervisor's restart
// reports the upgrade FAILED.
func execIfRequested(code int, stderr io.Writer) int {
	if pendingExec.path == "" {
		return code
	}
	argv := append([]string{pendingExec.path}, os.Args[1:]...)
	err := atexit.Exec(pendingExec.path, argv, os.Environ())
	fmt.Fprintf(stderr, "bcd node: exec %s: %v\n", pendingExec.path, err)
	if pendingExec.store != nil {
		if _, rerr := pendingExec.store.Rollback(); rerr != nil && !errors.Is(rerr, update.CodeNotPending) {
			fmt.Fprintf(stderr, "bcd node: rollback: %v\n", rerr)
		}
	}
	return 1
}

// withUpdate adds self-update to bcd node's agent options.
func withUpdate(o agent.Options, u *update.Updater, log *slog.Logger) agent.Options {
	o.NeverConnect = neverConnects(log)
	if u != nil {
		o.Updater, o.Exec = u, requestExec(u.Store)
	}
	return o
}
