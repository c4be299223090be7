//go:build helpere2e

// `bcd helper call [--socket PATH] OP`, in helpere2e builds only: sends one
// request to bcd helper with the JSON arguments read from standard input
// and prints the response. TestHelperAsRoot runs it as the bcd user from
// the installed slot, so the helper sees the node's own binary calling.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"bcd/internal/helper"
)

func init() { helperCall = runHelperCall }

const helperCallUsage = `usage: bcd helper call [--socket PATH] OP < ARGS.json

Sends OP with the JSON arguments on standard input (none when empty) to
bcd helper and prints its response. Exit 0 when the helper did it, 1 when
it refused (the response names the code), 2 on bad usage.
`

func runHelperCall(args []string, e env) int {
	fs := flag.NewFlagSet("helper call", flag.ContinueOnError)
	socket := fs.String("socket", helper.DefaultSocket, "")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprint(e.stderr, helperCallUsage)
		return 2
	}
	input, err := io.ReadAll(e.stdin)
	if err != nil {
		return fail(e, "helper call", err)
	}
	var argsJSON any
	if s := strings.TrimSpace(string(input)); s != "" {
		argsJSON = json.RawMessage(s)
	}
	var result json.RawMessage
	err = helper.Call(context.Background(), *socket, fs.Arg(0), argsJSON, &result)
	var ref *helper.Refusal
	switch {
	case err == nil:
		out, _ := json.Marshal(helper.Response{OK: true, Result: result})
		fmt.Fprintln(e.stdout, string(out))
		return 0
	case errors.As(err, &ref):
		out, _ := json.Marshal(helper.Response{Code: ref.Code, Error: ref.Message})
		fmt.Fprintln(e.stdout, string(out))
		return 1
	}
	return fail(e, "helper call", err)
}
