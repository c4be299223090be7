// The verdicts command: one parser's answer to each file of a fuzz corpus,
// `<file name>\t<verdict>` a line, for `cargo xtask fuzz`'s differential
// check against the Rust side's fuzz/examples/verdicts.rs (docs/harness.md,
// "Fuzzing"). The parsers, keys and time are those of fuzz/src/lib.rs.

package main

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"bcd/internal/pki"
	"bcd/internal/tpm/attestor"
)

// The fixture seed and time (testdata/README.md).
const (
	verdictSeed   = "bc-interop-v1"
	verdictAsOfMs = 1_767_225_600_000
)

// verdictOf is "accept" or "refuse: <code>", as the Rust side writes it.
func verdictOf(err error) string {
	if err == nil {
		return "accept"
	}
	if code := pki.CodeOf(err); code != "" {
		return "refuse: " + string(code)
	}
	return "refuse"
}

// verdict runs parser kind on data.
func verdict(kind string, data []byte) (string, error) {
	switch kind {
	case "dsse-json":
		root, err := pki.NewPublicKey(pki.DeriveEd25519(verdictSeed, "command-root/0").Public())
		if err != nil {
			return "", err
		}
		env, err := pki.ParseEnvelopeJSON(data)
		if err == nil {
			_, err = env.Verify(pki.PayloadTypeCommand, []*pki.PublicKey{root}, 1)
		}
		return verdictOf(err), nil
	case "jwe":
		csr, err := pki.NewPublicKey(&pki.DeriveP256(verdictSeed, "node/0").PublicKey)
		if err != nil {
			return "", err
		}
		_, err = pki.OpenJoinToken(pki.DeriveP256(verdictSeed, "join-encryption"), string(data), csr.Pin(), time.UnixMilli(verdictAsOfMs))
		return verdictOf(err), nil
	case "jws":
		issuer := []*ecdsa.PublicKey{&pki.DeriveP256(verdictSeed, "tunnels-issuer").PublicKey}
		_, err := pki.VerifyExecTicket(string(data), issuer, "https://compute.dev.local/tunnels", "node_0",
			time.UnixMilli(verdictAsOfMs))
		return verdictOf(err), nil
	case "manifest":
		a, b := pki.DeriveEd25519(verdictSeed, "release/0"), pki.DeriveEd25519(verdictSeed, "release/1")
		env, err := pki.SignEnvelope(nil, pki.PayloadTypeRelease, data, a, b)
		if err != nil {
			return "", err
		}
		keys := make([]*pki.PublicKey, 0, 2)
		for _, k := range []ed25519.PrivateKey{a, b} {
			pub, err := pki.NewPublicKey(k.Public())
			if err != nil {
				return "", err
			}
			keys = append(keys, pub)
		}
		_, err = pki.VerifyManifest(env, pki.ReleasePolicy{Keys: keys, Threshold: 2, MinSequence: 5}, time.UnixMilli(verdictAsOfMs))
		return verdictOf(err), nil
	case "csr":
		_, err := pki.ParseCSR(data)
		return verdictOf(err), nil
	case "certificate":
		ca, err := nodeCA()
		if err != nil {
			return "", err
		}
		_, err = pki.VerifyIssued(data, ca, pki.VerifyOptions{Usage: pki.UsageClient, At: time.UnixMilli(verdictAsOfMs)})
		return verdictOf(err), nil
	case "tpm-public":
		_, err := attestor.VerifyKeyCertification(data, make([]byte, 32), &attestor.CertifiedKey{Public: data})
		return verdictOf(err), nil
	}
	return "", fmt.Errorf("%w: no parser %q", errUsage, kind)
}

// nodeCA is the fixtures' node CA, testdata/pki/node-ca.pem, found from the
// working directory up (the Rust side includes the same file), read once.
var nodeCA = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "testdata", "pki", "node-ca.pem"))
		if err == nil {
			block, _ := pem.Decode(data)
			if block == nil {
				return nil, errors.New("testdata/pki/node-ca.pem is not PEM")
			}
			return block.Bytes, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, errors.New("no testdata/pki/node-ca.pem above the working directory")
		}
		dir = parent
	}
})

// verdicts prints the verdict of kind on every file given.
func verdicts(kind string, files []string, stdout io.Writer) error {
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		v, err := verdict(kind, data)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\t%s\n", filepath.Base(path), v)
	}
	return nil
}
