// Tests of the image store: found by digest, checked against it, hashed
// again when the file changes.

package images

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"bcd/internal/runtime"
)

func TestAnImageIsFoundByItsDigestAndChecked(t *testing.T) {
	s := New(t.TempDir())
	data := []byte("a base disk")
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if _, err := s.Resolve(digest); !errors.Is(err, ErrUnknown) {
		t.Fatalf("an empty store: %v", err)
	}
	if err := os.WriteFile(s.Path(digest, "qcow2"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	im, err := s.Resolve(digest)
	if err != nil || im.Base != s.Path(digest, "qcow2") || im.Format != "qcow2" || im.Digest != digest {
		t.Fatalf("%+v %v", im, err)
	}
	// The file changes under the same name: it is hashed again, and refused.
	if err := os.WriteFile(s.Path(digest, "qcow2"), []byte("another disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(digest); !errors.Is(err, ErrMismatch) {
		t.Fatalf("a changed image: %v", err)
	}
	if _, err := s.Resolve("sha256:../../etc"); !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("a bad digest: %v", err)
	}
}
