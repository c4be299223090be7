// Command bcd is the node daemon of the GPU fleet (docs/daemon.md, "The
// command line"): `bcd join`, `bcd node`, `bcd status`, `bcd sim`, `bcd
// helper`, `bcd version` and `bcd help`.
// Exit codes: 0 success, 1 failure (one line on standard error), 2 a
// command line it does not understand, 3 `bcd node` on a revoked node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"bcd/internal/atexit"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

const usage = `usage: bcd COMMAND [FLAGS]

bcd is the node daemon of the GPU fleet.

Commands:
  join       join the fleet with a join token (standard input or --token-file)
  node       run the node: the session with the gateway, commands, desired state
  status     print the running node's status (--json)
  sim        run N simulated node agents in one process (fakehw builds)
  helper     the root helper of an unprivileged bcd; its install script
  version    print the version
  help       print this message, or a command's (bcd help COMMAND)

Exit codes: 0 success, 1 failure, 2 bad usage, 3 (bcd node) the node was revoked.
`

// env is the process environment as the commands see it (tests replace it).
type env struct {
	// ctx ends on SIGTERM or SIGINT.
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

func main() {
	// A panic here still stops what must stop orderly (the fakehw swtpm).
	defer func() {
		if r := recover(); r != nil {
			atexit.Run()
			panic(r)
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(os.Args[1:], env{ctx: ctx, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	atexit.Run()
	code = execIfRequested(code, os.Stderr)
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	usage string
	run   func(args []string, e env) int
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"join":   {joinUsage, runJoin},
		"node":   {nodeUsage, runNode},
		"status": {statusUsage, runStatus},
		"sim":    {simUsage, runSim},
		"helper": {helperUsage, runHelper},
	}
}

// run executes the command line and returns the exit code.
func run(args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-version":
		if len(args) > 1 {
			fmt.Fprintf(e.stderr, "bcd: version takes no arguments\n\n%s", usage)
			return 2
		}
		fmt.Fprintln(e.stdout, version)
		return 0
	case "help", "-h", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fmt.Fprint(e.stdout, c.usage)
				return 0
			}
			if args[1] == "version" {
				fmt.Fprint(e.stdout, "usage: bcd version\n\nPrints the version.\n")
				return 0
			}
			fmt.Fprintf(e.stderr, "bcd: unknown command %q\n\n%s", args[1], usage)
			return 2
		}
		fmt.Fprint(e.stdout, usage)
		return 0
	}
	if c, ok := commands[args[0]]; ok {
		return c.run(args[1:], e)
	}
	fmt.Fprintf(e.stderr, "bcd: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// parse parses a command's flags; it returns an exit code when the
// command must stop (help: 0, bad usage: 2).
func parse(fs *flag.FlagSet, args []string, text string, e env) (int, bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.stdout, text)
			return 0, false
		}
		fmt.Fprintf(e.stderr, "bcd %s: %v\n\n%s", fs.Name(), err, text)
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "bcd %s: unexpected argument %q\n\n%s", fs.Name(), fs.Arg(0), text)
		return 2, false
	}
	return 0, true
}

// fail prints one line for err and returns 1.
func fail(e env, cmd string, err error) int {
	fmt.Fprintf(e.stderr, "bcd %s: %s\n", cmd, strings.ReplaceAll(err.Error(), "\n", " "))
	return 1
}

// logger writes structured lines (msg=area.event key=value …) to stderr.
func logger(e env, attrs ...any) *slog.Logger {
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With(attrs...)
}
