// Tests of the strict encodings: base64 as the Rust side decodes it, JSON
// objects as serde reads a struct, JSON strings as serde_json writes them.

package pki

import (
	"strings"
	"testing"
)

func TestBase64IsCanonicalOnly(t *testing.T) {
	for _, s := range []string{"cA==", "cGF5bG9hZA==", ""} {
		if _, err := decodeStd(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"cB==", "cA", "cA=", "c\nA==", "cA==\r\n", "c-A=", "!!"} {
		if _, err := decodeStd(s); err == nil {
			t.Errorf("%q was accepted", s)
		}
	}
	for _, s := range []string{"cB", "cA==", "c+A", "cA\n"} {
		if _, err := decodeURL(s); err == nil {
			t.Errorf("base64url %q was accepted", s)
		}
	}
}

func TestJSONObjectsAreReadAsSerdeReadsAStruct(t *testing.T) {
	known := []string{"a", "b"}
	for text, ok := range map[string]bool{
		`{"a":"x","b":1}`:          true,
		` {"a":"x","z":[1,{}]} `:   true,  // unknown members are skipped
		`{"z":1,"z":2}`:            false, // an unknown member twice (defect 10)
		`{"a":"x","a":"y"}`:        false, // a known member twice
		`{"a":"x"} {}`:             false,
		`["x",1]`:                  false,
		`{"a":"x"`:                 false,
		"{\"a\":\"\xff\"}":         false,
		`{"a":"x","b":1,"c":true}`: true,
	} {
		_, err := parseObject([]byte(text), false, known...)
		if (err == nil) != ok {
			t.Errorf("%s: err=%v, want ok=%v", text, err, ok)
		}
	}
	if _, err := parseObject([]byte(`{"a":"x","c":1}`), true, known...); err == nil {
		t.Error("an unknown member passed denyUnknown")
	}
	obj, err := parseObject([]byte(`{"A":"upper","b":null}`), false, known...)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if obj.present("a") || obj.present("b") || obj.required("b", &s) == nil {
		t.Error("case folding, or null counted as a value")
	}
	if v, err := obj.optionalString("b"); err != nil || v != "" {
		t.Errorf("an optional null: %q %v", v, err)
	}
	var n int64
	for _, text := range []string{`{"a":1.0}`, `{"a":"1"}`, `{"a":1e3}`, `{"a":9223372036854775808}`} {
		obj, _ := parseObject([]byte(text), false, "a")
		if obj.required("a", &n) == nil {
			t.Errorf("%s decoded as an i64", text)
		}
	}
}

// TestDefect10DuplicateMembersAreRefusedAtAnyDepth: two members with one
// name, anywhere in the document, refuse it, as pki/src/json.rs does; and
// what serde_json refuses beyond encoding/json is refused too.
func TestDefect10DuplicateMembersAreRefusedAtAnyDepth(t *testing.T) {
	for _, text := range []string{
		`{"a":1,"a":1}`,
		`{"a":1,"z":2,"z":3}`,
		`{"a":{"x":1,"x":2}}`,
		`{"a":[{"y":[],"y":null}]}`,
		`{"a":1,"\u0061":2}`,
		`{"z":"\ud800"}`,       // a lone high surrogate
		`{"z":"\udc00"}`,       // a lone low surrogate
		`{"z":"\ud800\u0041"}`, // a high surrogate before another escape
		`{"z":1e400}`,          // out of float64's range
		`{"z":` + strings.Repeat("[", 127) + strings.Repeat("]", 127) + `}`, // 128 deep
	} {
		if _, err := parseObject([]byte(text), false, "a"); err == nil {
			t.Errorf("%s was accepted", text)
		}
	}
	for _, text := range []string{
		`{"z":"\ud800\udc00","y":"\\u0041","x":1e-400}`,
		`{"z":` + strings.Repeat("[", 126) + strings.Repeat("]", 126) + `}`,
	} {
		if _, err := parseObject([]byte(text), false, "a"); err != nil {
			t.Errorf("%s: %v", text, err)
		}
	}
	obj, err := parseObject([]byte(`{"a":-0}`), false, "a")
	var n int64
	if err != nil || obj.required("a", &n) == nil {
		t.Errorf("-0 decoded as an integer (%v)", err)
	}
	// The sealed token of the review: two csr members.
	payload := `{"token":"bc_jt_x","csr":"sha256:a","iat":1,"csr":"sha256:b"}`
	if _, err := parseSealedTokenPayload([]byte(payload)); err == nil {
		t.Error("a sealed token payload with two csr members was accepted")
	}
	// The manifest of the review: two sequence members.
	manifest := `{"version":"0.9.0","sequence":1,"sequence":9,"artifacts":[]}`
	if _, err := parseManifest([]byte(manifest)); err == nil {
		t.Error("a manifest with two sequence members was accepted")
	}
}

func TestJSONStringsAreWrittenAsSerdeWritesThem(t *testing.T) {
	got := string(appendJSONString(nil, "a<b>&\"\\\n\t\b\f\r\x01\x7f\u2028é\xff"))
	want := `"a<b>&\"\\\n\t\b\f\r\u0001` + "\x7f\u2028é\uFFFD" + `"`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if !strings.HasPrefix(JWK(&DeriveP256("s", "k").PublicKey, "kid"), `{"crv":"P-256","kid":"kid","kty":"EC","x":"`) {
		t.Fatal("JWK members are not in RFC 7638 order")
	}
}
