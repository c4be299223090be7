// Tests of daemon.json: a fresh file verifies, the writer keeps a file that
// still verifies, and the checker refuses files that say something else.

package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/pki"
)

func TestWriteKeepsAFileThatStillVerifies(t *testing.T) {
	dir := t.TempDir()
	wrote, err := writeDaemonFile(dir)
	if err != nil || !wrote {
		t.Fatalf("first write: wrote=%v err=%v", wrote, err)
	}
	first, err := os.ReadFile(daemonPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	wrote, err = writeDaemonFile(dir)
	if err != nil || wrote {
		t.Fatalf("second write: wrote=%v err=%v", wrote, err)
	}
	second, _ := os.ReadFile(daemonPath(dir))
	if !bytes.Equal(first, second) {
		t.Fatal("the second write changed the file")
	}
	if !bytes.HasSuffix(first, []byte("}\n")) || !bytes.Contains(first, []byte("\n  \"seed\": ")) {
		t.Fatal("not pretty JSON with a trailing newline")
	}

	// A stale file is replaced by one that verifies.
	if err := os.WriteFile(daemonPath(dir), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if wrote, err := writeDaemonFile(dir); err != nil || !wrote {
		t.Fatalf("rewrite: wrote=%v err=%v", wrote, err)
	}
	data, _ := os.ReadFile(daemonPath(dir))
	if err := checkDaemonFile(data); err != nil {
		t.Fatal(err)
	}
}

func TestTwoBuildsDifferOnlyInRandomBytes(t *testing.T) {
	a, err := buildDaemonFile()
	if err != nil {
		t.Fatal(err)
	}
	b, err := buildDaemonFile()
	if err != nil {
		t.Fatal(err)
	}
	if a.SealedToken == b.SealedToken || a.CSR == b.CSR {
		t.Fatal("go-jose and ECDSA should draw fresh randomness")
	}
	for _, f := range []*daemonFile{a, b} {
		if err := checkDaemonFile(f.render()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckRefusesAFileThatSaysSomethingElse(t *testing.T) {
	good, err := buildDaemonFile()
	if err != nil {
		t.Fatal(err)
	}
	other, err := buildDaemonFile()
	if err != nil {
		t.Fatal(err)
	}
	node0 := pki.DeriveP256(daemonSeed, "node/0")
	foreignCSR, err := pki.CreateCSR(nil, node0, daemonCommonName)
	if err != nil {
		t.Fatal(err)
	}
	joinKey := pki.DeriveP256(daemonSeed, daemonJoinKey)
	csrDER := mustCSR(t, good)
	otherPin := mustPin(t, foreignCSR)
	boundElsewhere, err := pki.SealJoinToken(&joinKey.PublicKey, daemonToken, otherPin, daemonAsOfMs/1000)
	if err != nil {
		t.Fatal(err)
	}
	otherToken, err := pki.SealJoinToken(&joinKey.PublicKey, "bc_jt_other", mustPin(t, csrDER), daemonAsOfMs/1000)
	if err != nil {
		t.Fatal(err)
	}

	for name, tc := range map[string]struct {
		edit func(f *daemonFile)
		want string
	}{
		"other node id":             {func(f *daemonFile) { f.NodeID = "node_go_1" }, "fixed member"},
		"other token":               {func(f *daemonFile) { f.Token = "bc_jt_x" }, "fixed member"},
		"csr for another key":       {func(f *daemonFile) { f.CSR = b64(foreignCSR) }, "not for the node key"},
		"token bound to other csr":  {func(f *daemonFile) { f.SealedToken = boundElsewhere }, "another payload"},
		"token sealed with another": {func(f *daemonFile) { f.SealedToken = otherToken }, "another payload"},
		"statements swapped":        {func(f *daemonFile) { f.DiagResult = other.AllocationBound }, "differs"},
		"tampered payload":          {func(f *daemonFile) { f.DiagResult = flipPayload(t, f.DiagResult) }, "dsse-bad-signature"},
		"garbled sealed token":      {func(f *daemonFile) { f.SealedToken = "a.b" }, "jwe-malformed"},
	} {
		t.Run(name, func(t *testing.T) {
			f := *good
			tc.edit(&f)
			err := checkDaemonFile(f.render())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}

	t.Run("extra member", func(t *testing.T) {
		data := bytes.Replace(good.render(), []byte("{\n"), []byte("{\n  \"extra\": 1,\n"), 1)
		if err := checkDaemonFile(data); err == nil {
			t.Fatal("an extra member was accepted")
		}
	})
	t.Run("other layout", func(t *testing.T) {
		compact, _ := json.Marshal(good)
		if err := checkDaemonFile(compact); err == nil {
			t.Fatal("compact JSON was accepted")
		}
	})
}

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	if err := run([]string{"check", dir}, new(bytes.Buffer)); err == nil {
		t.Fatal("check passed without a file")
	}
	var out bytes.Buffer
	if err := run([]string{"write", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Base(dir), "daemon", "daemon.json"); !strings.HasPrefix(out.String(), "wrote "+want+"\n") ||
		strings.Count(out.String(), "\n") != 13 {
		t.Fatalf("write printed %q (daemon.json, then the 12 inventory files)", out.String())
	}
	out.Reset()
	if err := run([]string{"write", dir}, &out); err != nil || out.Len() != 0 {
		t.Fatalf("second write: %v, printed %q", err, out.String())
	}
	if err := run([]string{"check", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"frobnicate", dir}, &out); err == nil {
		t.Fatal("an unknown command passed")
	}
}

func TestVerifyPrintsOneSummaryLine(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"verify", "../../../testdata"}, &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], " cases (") || !strings.HasSuffix(lines[0], "reproduced byte-for-byte") {
		t.Fatalf("verify printed %q", out.String())
	}
}

func mustCSR(t *testing.T, f *daemonFile) []byte {
	t.Helper()
	der, err := decodeStd(f.CSR)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func mustPin(t *testing.T, csrDER []byte) string {
	t.Helper()
	csr, err := pki.ParseCSR(csrDER)
	if err != nil {
		t.Fatal(err)
	}
	return csr.Pin
}

func flipPayload(t *testing.T, text string) string {
	t.Helper()
	env, err := pki.ParseEnvelopeJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	env.Payload[len(env.Payload)-1] ^= 1
	return string(env.JSON())
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func decodeStd(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
