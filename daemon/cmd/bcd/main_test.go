// Tests of bcd's command line: version, help and unknown commands.

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		out, error string
	}{
		{args: []string{"version"}, code: 0, out: version + "\n"},
		{args: []string{"help"}, code: 0, out: usage},
		{args: nil, code: 2, error: "usage: bcd"},
		{args: []string{"version", "x"}, code: 2, error: "takes no arguments"},
		{args: []string{"frobnicate"}, code: 2, error: `unknown command "frobnicate"`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != tc.code {
			t.Errorf("%v: exit %d, want %d", tc.args, code, tc.code)
		}
		if stdout.String() != tc.out {
			t.Errorf("%v: stdout %q, want %q", tc.args, stdout.String(), tc.out)
		}
		if !strings.Contains(stderr.String(), tc.error) || (tc.error == "" && stderr.Len() > 0) {
			t.Errorf("%v: stderr %q, want it to contain %q", tc.args, stderr.String(), tc.error)
		}
	}
}
