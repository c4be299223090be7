// The runner of testdata/tpm/cases.json: every case through this package,
// each positive case's computed outcome compared with its `expect`, each
// negative case's code with its `error` (the format is documented in
// fixtures/src/tpm/cases.rs and testdata/tpm/README.md).

package attestor

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"time"
)

type signedJSON struct {
	Attest    []byte `json:"attest"`
	Signature []byte `json:"signature"`
}

type caseInput struct {
	EKRoots       []string `json:"ekRoots"`
	At            int64    `json:"at"`
	EKPublic      []byte   `json:"ekPublic"`
	EKCertificate []byte   `json:"ekCertificate"`
	AKPublic      []byte   `json:"akPublic"`
	NodeKeyPolicy string   `json:"nodeKeyPolicy"`
	Secret        []byte   `json:"secret"`
	Nonce         []byte   `json:"nonce"`
	Answer        *struct {
		ActivatedSecret []byte     `json:"activatedSecret"`
		Quote           signedJSON `json:"quote"`
		PCRValues       [][]byte   `json:"pcrValues"`
		NodeKey         *struct {
			Public  []byte     `json:"public"`
			Certify signedJSON `json:"certify"`
		} `json:"nodeKey"`
		CSR []byte `json:"csr"`
	} `json:"answer"`
}

type tpmCase struct {
	Name   string          `json:"name"`
	Kind   string          `json:"kind"`
	Input  caseInput       `json:"input"`
	Expect json.RawMessage `json:"expect"`
	Error  string          `json:"error"`
}

type document struct {
	Roots map[string][]byte `json:"roots"`
	Cases []tpmCase         `json:"cases"`
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// RunCases runs every case of a cases.json document; it returns the counts
// of positive and negative cases, or an error naming the first case whose
// outcome differs.
func RunCases(doc []byte) (positive, negative int, err error) {
	var d document
	if err := json.Unmarshal(doc, &d); err != nil {
		return 0, 0, fmt.Errorf("cases.json: %w", err)
	}
	for _, c := range d.Cases {
		got, err := run(d.Roots, &c)
		if err != nil {
			return 0, 0, fmt.Errorf("case %s: %w", c.Name, err)
		}
		if c.Error != "" {
			if code := CodeOf(got.err); code != Code(c.Error) {
				return 0, 0, fmt.Errorf("case %s: expected %s, got %v", c.Name, c.Error, got.err)
			}
			negative++
			continue
		}
		if got.err != nil {
			return 0, 0, fmt.Errorf("case %s: expected success, got %v", c.Name, got.err)
		}
		var want any
		if err := json.Unmarshal(c.Expect, &want); err != nil {
			return 0, 0, fmt.Errorf("case %s: expect: %w", c.Name, err)
		}
		raw, _ := json.Marshal(got.expect)
		var found any
		_ = json.Unmarshal(raw, &found)
		if !reflect.DeepEqual(want, found) {
			return 0, 0, fmt.Errorf("case %s: expected %s, got %s", c.Name, c.Expect, raw)
		}
		positive++
	}
	return positive, negative, nil
}

type outcome struct {
	expect map[string]any
	err    error
}

func run(roots map[string][]byte, c *tpmCase) (outcome, error) {
	a := &Attestor{NodeKey: PolicyTPM}
	for _, name := range c.Input.EKRoots {
		r, ok := roots[name]
		if !ok {
			return outcome{}, fmt.Errorf("unknown root %q", name)
		}
		a.Roots = append(a.Roots, r)
	}
	at := time.UnixMilli(c.Input.At)
	r1 := &Round1{EKPublic: c.Input.EKPublic, EKCertificate: c.Input.EKCertificate, AKPublic: c.Input.AKPublic}
	switch c.Kind {
	case "tpm-round1":
		e, err := a.VerifyRound1(r1, at)
		if err != nil {
			return outcome{err: err}, nil
		}
		return outcome{expect: map[string]any{"akName": b64(e.AKName), "ekBinding": hex.EncodeToString(e.EKBinding[:])}}, nil
	case "tpm-answer":
		a.NodeKey = NodeKeyPolicy(c.Input.NodeKeyPolicy)
		if a.NodeKey != PolicyTPM && a.NodeKey != PolicyCertified && a.NodeKey != PolicyAny {
			return outcome{}, fmt.Errorf("unknown policy %q", c.Input.NodeKeyPolicy)
		}
		e, err := a.VerifyRound1(r1, at)
		if err != nil {
			return outcome{err: err}, nil
		}
		in := c.Input.Answer
		if in == nil {
			return outcome{}, fmt.Errorf("no answer")
		}
		ans := &Answer{
			ActivatedSecret: in.ActivatedSecret,
			Quote:           Signed{Attest: in.Quote.Attest, Signature: in.Quote.Signature},
			PCRValues:       in.PCRValues,
			CSR:             in.CSR,
		}
		if in.NodeKey != nil {
			ans.NodeKey = &CertifiedKey{
				Public:  in.NodeKey.Public,
				Certify: Signed{Attest: in.NodeKey.Certify.Attest, Signature: in.NodeKey.Certify.Signature},
			}
		}
		r, err := a.VerifyAnswer(e, c.Input.Secret, c.Input.Nonce, ans)
		if err != nil {
			return outcome{err: err}, nil
		}
		values := make([]any, len(r.PCRValues))
		for i, v := range r.PCRValues {
			values[i] = b64(v)
		}
		pin := sha256.Sum256(r.CSR.RawSubjectPublicKeyInfo)
		return outcome{expect: map[string]any{
			"akName":      b64(r.AKName),
			"ekBinding":   hex.EncodeToString(r.EKBinding[:]),
			"pcrValues":   values,
			"csrPin":      "sha256:" + base64.RawURLEncoding.EncodeToString(pin[:]),
			"csrKeyInTpm": r.CSRKeyInTPM,
		}}, nil
	default:
		return outcome{}, fmt.Errorf("unknown kind %q", c.Kind)
	}
}
