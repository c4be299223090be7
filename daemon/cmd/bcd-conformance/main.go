// Command bcd-conformance runs the conformance cases (internal/conformance)
// against a gateway a caller prepared, and prints one line per case:
// "<case> <code> <grpc-status>".
//
//	bcd-conformance run TARGET.json   the gateway's answers
//	bcd-conformance expected          what proto/refusals.toml says they must be
//
// interop/tests/conformance.rs runs it against a Rust dev stack and compares
// with the Go test gateway's answers (go test ./internal/conformance).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"bcd/internal/conformance"
)

const usage = "usage: bcd-conformance run TARGET.json | bcd-conformance expected\n"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "bcd-conformance: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 1 && args[0] == "expected":
		fmt.Print(conformance.Lines(conformance.Expected()))
		return nil
	case len(args) == 2 && args[0] == "run":
		data, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		var target conformance.Target
		if err := json.Unmarshal(data, &target); err != nil {
			return fmt.Errorf("%s: %w", args[1], err)
		}
		results, err := conformance.Run(context.Background(), &target)
		if err != nil {
			return err
		}
		fmt.Print(conformance.Lines(results))
		return nil
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
		return nil
	}
}
