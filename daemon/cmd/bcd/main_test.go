// Tests of bcd's command line: version, help for every command, bad usage,
// and the exit codes of commands that cannot run.

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func runWith(args []string, stdin string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, env{ctx: context.Background(), stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }})
	return code, stdout.String(), stderr.String()
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		out, error string
	}{
		{args: []string{"version"}, code: 0, out: version + "\n"},
		{args: []string{"help"}, code: 0, out: usage},
		{args: []string{"-h"}, code: 0, out: usage},
		{args: nil, code: 2, error: "usage: bcd"},
		{args: []string{"version", "x"}, code: 2, error: "takes no arguments"},
		{args: []string{"frobnicate"}, code: 2, error: `unknown command "frobnicate"`},
		{args: []string{"help", "join"}, code: 0, out: joinUsage},
		{args: []string{"join", "-h"}, code: 0, out: joinUsage},
		{args: []string{"node", "--help"}, code: 0, out: nodeUsage},
		{args: []string{"status", "-h"}, code: 0, out: statusUsage},
		{args: []string{"sim", "-h"}, code: 0, out: simUsage},
		{args: []string{"node", "--frob"}, code: 2, error: "flag provided but not defined"},
		{args: []string{"status", "extra"}, code: 2, error: `unexpected argument "extra"`},
	} {
		code, out, errOut := runWith(tc.args, "")
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d", tc.args, code, tc.code)
		}
		if out != tc.out {
			t.Errorf("%v: stdout %q, want %q", tc.args, out, tc.out)
		}
		if !strings.Contains(errOut, tc.error) || (tc.error == "" && errOut != "") {
			t.Errorf("%v: stderr %q, want it to contain %q", tc.args, errOut, tc.error)
		}
	}
}

func TestStatusWithoutARunningNodeExits1(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	writeFile(t, path, "data_dir = \"data\"\n")
	code, _, errOut := runWith([]string{"status", "--json", "--config", path}, "")
	if code != 1 || !strings.Contains(errOut, "bcd is not running") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestSimSeeds(t *testing.T) {
	if simSeed("100", 3) != "103" || simSeed("x", 2) != "x-2" {
		t.Fatal(simSeed("100", 3), simSeed("x", 2))
	}
}
