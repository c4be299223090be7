// Tests of the JWE profile beyond the fixtures: go-jose's output opens, and
// header defects get the code the Rust side gives them.

package pki

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSealedJWEsOpenOnlyForTheirRecipient(t *testing.T) {
	key := DeriveP256("s", "join-encryption")
	sealed, err := SealJWE(&key.PublicKey, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := SealJWE(&key.PublicKey, []byte("hello"))
	if sealed == again {
		t.Fatal("two seals are equal: no fresh randomness")
	}
	if plain, err := OpenJWE(key, sealed); err != nil || string(plain) != "hello" {
		t.Fatalf("open: %q %v", plain, err)
	}
	if _, err := OpenJWE(DeriveP256("s", "other"), sealed); !errors.Is(err, CodeJWEKid) {
		t.Fatalf("another recipient: %v", err)
	}
	header, _ := base64.RawURLEncoding.DecodeString(strings.SplitN(sealed, ".", 2)[0])
	for _, member := range []string{`"apu"`, `"apv"`, `"zip"`} {
		if strings.Contains(string(header), member) {
			t.Errorf("go-jose wrote %s: %s", member, header)
		}
	}
}

func TestJWEHeaderDefectsGetTheRustCodes(t *testing.T) {
	key := DeriveP256("s", "join-encryption")
	pub, _ := NewPublicKey(&key.PublicKey)
	sealed, err := SealJWE(&key.PublicKey, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(sealed, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(parts[0])
	header := string(raw)
	epk := header[strings.Index(header, `"epk":`)+len(`"epk":`) : strings.Index(header, `},`)+1]
	kid := `"kid":"` + pub.Pin() + `"`
	profile := `"alg":"ECDH-ES+A256KW","enc":"A256GCM"`
	with := func(h string) string {
		p := append([]string{base64.RawURLEncoding.EncodeToString([]byte(h))}, parts[1:]...)
		return strings.Join(p, ".")
	}
	for h, want := range map[string]Code{
		`{` + kid + `,` + profile + `,"epk":` + epk + `}`:                        CodeJWEDecrypt, // reordered: another AAD
		`{` + profile + `,"alg":"ECDH-ES+A256KW","epk":` + epk + `,` + kid + `}`: CodeJWEMalformed,
		`{"ALG":"ECDH-ES+A256KW","enc":"A256GCM","epk":` + epk + `,` + kid + `}`: CodeJWEHeader,
		`{` + profile + `,"zip":null,"epk":` + epk + `,` + kid + `}`:             CodeJWEDecrypt, // null is absent
		`{` + profile + `,"crit":["exp"],"epk":` + epk + `,` + kid + `}`:         CodeJWEHeader,
		`{` + profile + `,"epk":"key",` + kid + `}`:                              CodeJWEMalformed,
		`{` + profile + `,"epk":null,` + kid + `}`:                               CodeJWEEPK,
		`{` + profile + `,"epk":` + epk + `,"kid":null}`:                         CodeJWEKid,
		`{` + profile + `,"epk":` + epk + `,"kid":7}`:                            CodeJWEMalformed,
		`[]`: CodeJWEMalformed,
	} {
		if _, err := OpenJWE(key, with(h)); CodeOf(err) != want {
			t.Errorf("%s: got %v, want %s", h, err, want)
		}
	}
}

func TestJoinTokensAreBoundToTheirCSR(t *testing.T) {
	key := DeriveP256("s", "join-encryption")
	sealed, err := SealJoinToken(&key.PublicKey, "bc_jt_1", "sha256:csr", 10)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := OpenJoinToken(key, sealed, "sha256:csr", time.Unix(10, 0)); err != nil || p.Token != "bc_jt_1" || p.IAT != 10 {
		t.Fatalf("open: %+v %v", p, err)
	}
	if _, err := OpenJoinToken(key, sealed, "sha256:other", time.Unix(10, 0)); !errors.Is(err, CodeTokenCSRMismatch) {
		t.Fatalf("another CSR: %v", err)
	}
	for _, payload := range []string{`{"token":"t","csr":"c"}`, `{"token":"t","csr":"c","iat":1.5}`, `{"token":null,"csr":"c","iat":1}`} {
		bad, _ := SealJWE(&key.PublicKey, []byte(payload))
		_, err := OpenJoinToken(key, bad, "c", time.Unix(10, 0))
		if !errors.Is(err, CodeTokenPayload) || strings.Contains(err.Error(), "t\"") {
			t.Errorf("%s: %v", payload, err)
		}
	}
}
