// TestInterop and TestRelease: every case of the Rust-written fixture files
// run through package pki, and the re-production of their deterministic bytes.

package pki_test

import (
	"testing"

	"bcd/internal/pki/interop"
)

func runDocument(t *testing.T, path string) {
	t.Helper()
	doc, err := interop.LoadDocument(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := interop.NewKeyring(doc.Seed, doc.Keys)
	for i := range doc.Cases {
		c := &doc.Cases[i]
		t.Run(c.Name, func(t *testing.T) {
			if err := interop.CheckCase(keys, c); err != nil {
				t.Error(err)
			}
		})
	}
	for _, r := range interop.Reproductions(doc, keys) {
		t.Run("reproduce/"+r.Name, func(t *testing.T) {
			if err := r.Check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestInterop(t *testing.T) { runDocument(t, "../../../testdata/interop.json") }

func TestRelease(t *testing.T) { runDocument(t, "../../../testdata/release/release.json") }
