// Tests of the exit cleanups: the latest first, each once, and removed ones
// never.

package atexit

import (
	"slices"
	"testing"
)

func TestRunIsLIFOAndOnce(t *testing.T) {
	var ran []string
	Register(func() { ran = append(ran, "first") })
	gone := Register(func() { ran = append(ran, "removed") })
	Register(func() { ran = append(ran, "last") })
	gone()
	Run()
	Run()
	if !slices.Equal(ran, []string{"last", "first"}) {
		t.Fatalf("ran %v", ran)
	}
}
