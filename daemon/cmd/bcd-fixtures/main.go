// Command bcd-fixtures is the Go half of the fixture factory, run by
// `cargo xtask daemon-fixtures` (fixtures/src/bin/daemon-fixtures.rs):
// it writes and checks testdata/daemon/daemon.json and the inventory golden
// testdata/daemon/inventory/, and verifies every case of the Rust-written
// fixtures in Go.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"bcd/internal/pki/interop"
)

const usage = `usage: bcd-fixtures COMMAND DIR | bcd-fixtures verdicts KIND FILE...

DIR is the testdata directory.

Commands:
  write DIR    write DIR/daemon/daemon.json, unless the file there still
               verifies and says the same (its signatures are random), and
               the inventory golden DIR/daemon/inventory/ (fakehw, seed 41:
               <variant>/<section>.pb and hashes.json)
  check DIR    write nothing; fail if DIR/daemon/daemon.json is missing,
               does not verify, or says something other than write would,
               or if an inventory golden file differs by a byte
  verify DIR   run every case of DIR/interop.json and DIR/release/release.json
               and re-produce their deterministic bytes; print one summary line
  verdicts KIND FILE...
               print "<file name>\t<verdict>" for each file, the verdict of the
               parser KIND (dsse-json, jwe, jws, manifest, tpm-public): the Go
               half of the fuzz corpora's differential check
`

// errUsage marks a command line that is not understood.
var errUsage = errors.New("bad usage")

func main() {
	err := run(os.Args[1:], os.Stdout)
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		fmt.Fprintf(os.Stderr, "bcd-fixtures: %v\n\n%s", err, usage)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "bcd-fixtures: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		_, err := io.WriteString(stdout, usage)
		return err
	}
	if len(args) >= 2 && args[0] == "verdicts" {
		return verdicts(args[1], args[2:], stdout)
	}
	if len(args) != 2 {
		return fmt.Errorf("%w: expected a command and a directory", errUsage)
	}
	command, dir := args[0], args[1]
	switch command {
	case "write":
		wrote, err := writeDaemonFile(dir)
		if err != nil {
			return err
		}
		if wrote {
			fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(filepath.Base(dir), "daemon", "daemon.json"))
		}
		golden, err := writeInventory(dir)
		if err != nil {
			return err
		}
		for _, rel := range golden {
			fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(filepath.Base(dir), "daemon", "inventory", rel))
		}
		return nil
	case "check":
		data, err := os.ReadFile(daemonPath(dir))
		if err != nil {
			return fmt.Errorf("%w; run `cargo xtask daemon-fixtures`", err)
		}
		if err := checkDaemonFile(data); err != nil {
			return fmt.Errorf("%s is stale: %w; run `cargo xtask daemon-fixtures`", daemonPath(dir), err)
		}
		return checkInventory(dir)
	case "verify":
		return verify(dir, stdout)
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, command)
}

// verify runs the interop and release documents and prints the summary.
func verify(dir string, stdout io.Writer) error {
	var total interop.Summary
	var failures []interop.Failure
	for _, rel := range []string{"interop.json", filepath.Join("release", "release.json")} {
		doc, err := interop.LoadDocument(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		sum, failed := interop.Verify(doc)
		total = total.Add(sum)
		for _, f := range failed {
			failures = append(failures, interop.Failure{Name: rel + ": " + f.Name, Err: f.Err})
		}
	}
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintln(os.Stderr, f.Error())
		}
		return fmt.Errorf("%d failure(s); passed: %s", len(failures), total)
	}
	_, err := fmt.Fprintln(stdout, total)
	return err
}
