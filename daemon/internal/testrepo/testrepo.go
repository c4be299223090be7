// Package testrepo is test support, imported only by tests: it finds the
// repository's testdata/ directory by walking up from the test's working
// directory, so that a test reads the committed fixtures wherever its
// package sits.
package testrepo

import (
	"os"
	"path/filepath"
	"testing"
)

// Path is testdata/<elem...> in the nearest directory, from the test's
// working directory upwards, that has it; the test fails where none has.
func Path(t testing.TB, elem ...string) string {
	t.Helper()
	rel := filepath.Join(append([]string{"testdata"}, elem...)...)
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		candidate := filepath.Join(dir, rel)
		if _, err := os.Stat(candidate); err == nil {
			return candidate
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no %s above the test's directory", rel)
		}
		dir = parent
	}
}

// Read reads testdata/<elem...> (see Path).
func Read(t testing.TB, elem ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(Path(t, elem...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
