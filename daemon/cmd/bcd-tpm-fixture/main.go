// Command bcd-tpm-fixture is the Go half of the TPM fixture factory
// (`cargo xtask daemon-tpm-fixture`, testdata/tpm/README.md): bcd's node
// side of the two join rounds, against a TPM reached over swtpm's data
// channel, and the Go check of the committed set.
//
//	bcd-tpm-fixture round1 --tpm 127.0.0.1:PORT --out round1.json
//	bcd-tpm-fixture answer --tpm 127.0.0.1:PORT --challenge challenge.json --out answer.json
//	bcd-tpm-fixture verify --testdata DIR
//
// round1 reads the EK certificate from NV, creates the persistent AK and
// writes round 1. answer extends the known measurements into PCRs 0–7,
// then answers the challenge (ActivateCredential, Quote, a node key made in
// the TPM and certified by the AK, a CSR signed by it in the TPM). verify
// runs every case of testdata/tpm/cases.json through the Go attestor and
// checks the EK certificate against the EK root. Each TPM session ends with
// TPM2_Shutdown, so the swtpm that the caller stops is stopped orderly.
package main

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"bcd/internal/tpm"
	"bcd/internal/tpm/attestor"
)

const usage = `usage:
  bcd-tpm-fixture round1 --tpm ADDR --out FILE
  bcd-tpm-fixture answer --tpm ADDR --challenge FILE --out FILE
  bcd-tpm-fixture verify --testdata DIR`

// round1File is testdata/tpm/round1.json.
type round1File struct {
	Comment string `json:"comment"`
	Version int    `json:"version"`
	tpm.Round1
	AKHandle uint32 `json:"akHandle"`
}

// challengeFile is testdata/tpm/challenge.json (written by Rust).
type challengeFile struct {
	Comment string `json:"comment"`
	Version int    `json:"version"`
	AKName  []byte `json:"akName"`
	tpm.Challenge
}

type pcrs struct {
	Bank    string   `json:"bank"`
	Indices []int    `json:"indices"`
	Values  [][]byte `json:"values"`
}

type measurement struct {
	PCR    int    `json:"pcr"`
	Event  string `json:"event"`
	Digest []byte `json:"digest"`
}

type nodeKey struct {
	Handle  uint32     `json:"handle"`
	Public  []byte     `json:"public"`
	Certify tpm.Signed `json:"certify"`
}

// answerFile is testdata/tpm/answer.json.
type answerFile struct {
	Comment         string        `json:"comment"`
	Version         int           `json:"version"`
	ActivatedSecret []byte        `json:"activatedSecret"`
	Quote           tpm.Signed    `json:"quote"`
	PCRs            pcrs          `json:"pcrs"`
	Measurements    []measurement `json:"measurements"`
	NodeKey         *nodeKey      `json:"nodeKey"`
	CSR             []byte        `json:"csr"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "round1":
		err = round1(os.Args[2:])
	case "answer":
		err = answer(os.Args[2:])
	case "verify":
		err = verify(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bcd-tpm-fixture:", err)
		os.Exit(1)
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// session opens the TPM, runs f, and ends with TPM2_Shutdown.
func session(addr string, f func(*tpm.TPM) error) error {
	t, err := tpm.Dial(addr, 30*time.Second)
	if err != nil {
		return err
	}
	err = f(t)
	if shutdownErr := t.Shutdown(); err == nil && shutdownErr != nil {
		err = fmt.Errorf("TPM2_Shutdown: %w", shutdownErr)
	}
	return errors.Join(err, t.Close())
}

func round1(args []string) error {
	fs := flag.NewFlagSet("round1", flag.ExitOnError)
	addr := fs.String("tpm", "", "the TPM's data channel (host:port)")
	out := fs.String("out", "round1.json", "where to write round 1")
	fs.Parse(args)
	return session(*addr, func(t *tpm.TPM) error {
		r, err := tpm.BeginJoin(t, tpm.AKHandle)
		if err != nil {
			return err
		}
		return writeJSON(*out, round1File{
			Comment: "Written by `cargo xtask daemon-tpm-fixture` (Go: daemon/cmd/bcd-tpm-fixture round1, on swtpm); " +
				"not byte-stable (swtpm seeds are random). Consumed by Rust fixtures::tpm and daemon/internal/tpm tests.",
			Version:  1,
			Round1:   *r,
			AKHandle: uint32(tpm.AKHandle),
		})
	})
}

// measurementOf returns the event measured into PCR pcr and its SHA-256.
func measurementOf(pcr int) (string, []byte) {
	event := fmt.Sprintf("bc-interop measurement %d", pcr)
	d := sha256.Sum256([]byte(event))
	return event, d[:]
}

func answer(args []string) error {
	fs := flag.NewFlagSet("answer", flag.ExitOnError)
	addr := fs.String("tpm", "", "the TPM's data channel (host:port)")
	in := fs.String("challenge", "challenge.json", "the attestor's challenge")
	out := fs.String("out", "answer.json", "where to write the answer")
	fs.Parse(args)
	raw, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	var ch challengeFile
	if err := json.Unmarshal(raw, &ch); err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	return session(*addr, func(t *tpm.TPM) error {
		var ms []measurement
		for _, pcr := range tpm.QuotedPCRs {
			event, digest := measurementOf(pcr)
			if err := t.Extend(pcr, digest); err != nil {
				return fmt.Errorf("extending PCR %d: %w", pcr, err)
			}
			ms = append(ms, measurement{PCR: pcr, Event: event, Digest: digest})
		}
		a, key, err := tpm.AnswerChallenge(t, tpm.AKHandle, tpm.NodeKeyHandle, &ch.Challenge, "bcd")
		if err != nil {
			return err
		}
		return writeJSON(*out, answerFile{
			Comment: "Written by `cargo xtask daemon-tpm-fixture` (Go: daemon/cmd/bcd-tpm-fixture answer, on swtpm); " +
				"not byte-stable (TPM signatures and clocks). Consumed by Rust fixtures::tpm and daemon/internal/tpm tests.",
			Version:         1,
			ActivatedSecret: a.ActivatedSecret,
			Quote:           a.Quote,
			PCRs:            pcrs{Bank: "sha256", Indices: tpm.QuotedPCRs, Values: a.PCRValues},
			Measurements:    ms,
			NodeKey:         &nodeKey{Handle: uint32(key.Handle()), Public: a.NodeKey.Public, Certify: a.NodeKey.Certify},
			CSR:             a.CSR,
		})
	})
}

func verify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	testdata := fs.String("testdata", "testdata", "the testdata directory")
	fs.Parse(args)
	dir := filepath.Join(*testdata, "tpm")
	root, err := os.ReadFile(filepath.Join(dir, "ek-root.der"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(filepath.Join(dir, "ek-cert.der"))
	if err != nil {
		return err
	}
	if err := attestor.VerifyEKCertificate(cert, [][]byte{root}, attestor.AsOf); err != nil {
		return fmt.Errorf("ek-cert.der: %w", err)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		return err
	}
	positive, negative, err := attestor.RunCases(doc)
	if err != nil {
		return err
	}
	fmt.Printf("tpm: the EK certificate chains to ek-root.der; %d cases (%d positive, %d negative)\n",
		positive+negative, positive, negative)
	return nil
}
