// Package interop runs the cross-language fixture cases that the Rust
// fixture factory writes (testdata/interop.json, testdata/release/release.json)
// through package pki, and re-produces their deterministic bytes. It is the
// Go twin of the Rust side's fixtures/src/interop/run.rs and of the
// verifiers of its families (one file here per family); TestInterop,
// TestRelease and `bcd-fixtures verify` share it.
package interop

import (
	"encoding/json"
	"fmt"
	"os"
)

// Document is a fixture file in the case format of testdata/README.md.
type Document struct {
	// Seed is the seed every key derives from.
	Seed string `json:"seed"`
	// AsOfMs is the time every fixture is valid at (Unix milliseconds).
	AsOfMs int64 `json:"asOfMs"`
	// Keys describes the fixture keys.
	Keys []KeyEntry `json:"keys"`
	// Cases are the cases.
	Cases []Case `json:"cases"`
	// Manifest is the release document's good manifest envelope (JSON form).
	Manifest string `json:"manifest,omitempty"`
}

// KeyEntry is one key of the keys section.
type KeyEntry struct {
	// Label names the key; its derivation input.
	Label string `json:"label"`
	// Alg is "ed25519" or "p256".
	Alg string `json:"alg"`
	// SPKI is the standard base64 SubjectPublicKeyInfo DER.
	SPKI string `json:"spki"`
	// Pin is the key's pin.
	Pin string `json:"pin"`
	// PrivatePKCS8 is the standard base64 PKCS#8 DER (test-only keys).
	PrivatePKCS8 string `json:"privatePkcs8"`
	// JWK is the public JWK with kid (P-256 only).
	JWK string `json:"jwk,omitempty"`
	// JWKThumbprint is the RFC 7638 thumbprint (P-256 only).
	JWKThumbprint string `json:"jwkThumbprint,omitempty"`
}

// Case is one case: positive with Expect, negative with Error.
type Case struct {
	// Name names the case (its defect, for a negative one).
	Name string `json:"name"`
	// Kind selects the verifier.
	Kind string `json:"kind"`
	// Input is the verifier's input.
	Input json.RawMessage `json:"input"`
	// Expect is what the verifier returns, for a positive case.
	Expect json.RawMessage `json:"expect,omitempty"`
	// Error is the refusal code, for a negative case.
	Error string `json:"error,omitempty"`
}

// Positive reports whether the case expects success.
func (c *Case) Positive() bool { return c.Expect != nil }

// LoadDocument reads a fixture file.
func LoadDocument(path string) (*Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc := &Document{}
	if err := json.Unmarshal(data, doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if doc.Seed == "" || len(doc.Cases) == 0 {
		return nil, fmt.Errorf("%s: no seed or no cases", path)
	}
	for i, c := range doc.Cases {
		if c.Positive() == (c.Error != "") {
			return nil, fmt.Errorf("%s: case %d (%s) needs exactly one of expect and error", path, i, c.Name)
		}
	}
	return doc, nil
}
