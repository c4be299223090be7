// Tests of the expect helpers that mirror Rust behaviour.

package interop

import "testing"

func TestLossyUTF8ReplacesMaximalSubparts(t *testing.T) {
	for in, want := range map[string]string{
		"ok":                   "ok",
		"a\xffb":               "a\uFFFDb",
		"\xe2\x82A":            "\uFFFDA",            // a truncated 3-byte sequence is one subpart
		"\xe0\x80":             "\uFFFD\uFFFD",       // E0 80 can never be well formed
		"\xed\xa0\x80":         "\uFFFD\uFFFD\uFFFD", // a surrogate
		"\xf0\x9f\x98":         "\uFFFD",
		"\xf0\x9f\x98\x80\x80": "\U0001F600\uFFFD",
	} {
		if got := lossyUTF8([]byte(in)); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
