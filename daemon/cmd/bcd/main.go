// Command bcd is the node daemon of the GPU fleet (DESIGN.md §5). For now it
// knows `bcd version` and its usage; join, node and status come later.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

const usage = `usage: bcd COMMAND

bcd is the node daemon of the GPU fleet.

Commands:
  version    print the version
  help       print this message
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code: 0 on success,
// 2 for a command line it does not understand.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "bcd: version takes no arguments\n\n%s", usage)
			return 2
		}
		fmt.Fprintln(stdout, version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "bcd: unknown command %q\n\n%s", args[0], usage)
	return 2
}
