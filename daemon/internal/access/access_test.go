// Tests of the access section: the files it lays out and refuses, the KRL
// as ssh-keygen -Q reads it (a revoked key and a certificate revoked by
// serial are reported revoked, a valid key and another serial not), and
// the reconciler writing under a root as sshd requires.

package access

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"bcd/internal/converge"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"golang.org/x/crypto/ssh"
)

// sshKey is a seeded Ed25519 key as an OpenSSH public key and its signer.
func sshKey(t *testing.T, label string) (ssh.PublicKey, ssh.Signer) {
	t.Helper()
	priv := pki.DeriveEd25519("access-test", label)
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return pub, signer
}

func line(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " a comment"
}

// requireSSHKeygen skips without ssh-keygen, except under CI.
func requireSSHKeygen(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("ssh-keygen")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("ssh-keygen is not installed (openssh-client; cargo xtask prereqs installs it)")
		}
		t.Skip("ssh-keygen is not installed (openssh-client)")
	}
	return path
}

// certificate signs a user certificate of key with serial.
func certificate(t *testing.T, key ssh.PublicKey, ca ssh.Signer, serial uint64) *ssh.Certificate {
	t.Helper()
	cert := &ssh.Certificate{Key: key, Serial: serial, CertType: ssh.UserCert, KeyId: "test", ValidPrincipals: []string{"root"},
		ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestTheKRLIsWhatSSHKeygenReads(t *testing.T) {
	keygen := requireSSHKeygen(t)
	revoked, _ := sshKey(t, "revoked")
	valid, _ := sshKey(t, "valid")
	caPub, ca := sshKey(t, "ca")
	dir := t.TempDir()
	krl := filepath.Join(dir, "revoked_keys.krl")
	if err := os.WriteFile(krl, KRL(3, []ssh.PublicKey{revoked, revoked}, []RevokedSerials{{CA: caPub, Serials: []uint64{9, 7}}}), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := map[string]struct {
		path    string
		revoked bool
	}{
		"a revoked key":                   {write("revoked.pub", ssh.MarshalAuthorizedKey(revoked)), true},
		"a valid key":                     {write("valid.pub", ssh.MarshalAuthorizedKey(valid)), false},
		"a certificate of a revoked key":  {write("rk-cert.pub", ssh.MarshalAuthorizedKey(certificate(t, revoked, ca, 1))), true},
		"a certificate revoked by serial": {write("s7-cert.pub", ssh.MarshalAuthorizedKey(certificate(t, valid, ca, 7))), true},
		"another serial":                  {write("s8-cert.pub", ssh.MarshalAuthorizedKey(certificate(t, valid, ca, 8))), false},
	}
	for what, c := range cases {
		out, err := exec.Command(keygen, "-Q", "-f", krl, c.path).CombinedOutput()
		said := strings.TrimSpace(string(out))
		if c.revoked != strings.HasSuffix(said, "REVOKED") || c.revoked != (err != nil) {
			t.Errorf("%s: ssh-keygen -Q said %q (%v)", what, said, err)
		}
	}
}

func section(t *testing.T) *agentv1.AccessSection {
	revoked, _ := sshKey(t, "revoked")
	alice, _ := sshKey(t, "alice")
	caPub, _ := sshKey(t, "ca")
	sandbox, _ := sshKey(t, "sandbox")
	return &agentv1.AccessSection{
		Accounts: []*agentv1.SshAccount{
			{Name: "root", Principals: []string{"root", "breakglass"}},
			{Name: "alice", AuthorizedKeys: []string{line(alice)}},
		},
		TrustedUserCaKeys: []string{line(caPub)},
		SandboxUserCaKeys: []string{line(sandbox)},
		RevokedKeys:       []string{line(revoked)},
		RevokedSerials:    []*agentv1.RevokedSerials{{CaKey: line(caPub), Serials: []uint64{7}}},
	}
}

func TestPlanRefusesWhatSSHDWouldNotRead(t *testing.T) {
	good := section(t)
	if _, err := Plan(good, 1); err != nil {
		t.Fatal(err)
	}
	caPub, _ := sshKey(t, "ca")
	_, ca := sshKey(t, "ca")
	alice, _ := sshKey(t, "alice")
	cert := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(certificate(t, alice, ca, 1))))
	for what, edit := range map[string]func(s *agentv1.AccessSection){
		"an account name":      func(s *agentv1.AccessSection) { s.Accounts[0].Name = "../etc" },
		"an account twice":     func(s *agentv1.AccessSection) { s.Accounts[1].Name = "root" },
		"a key that is no key": func(s *agentv1.AccessSection) { s.Accounts[1].AuthorizedKeys = []string{"ssh-ed25519 AAAA"} },
		"a key with options":   func(s *agentv1.AccessSection) { s.Accounts[1].AuthorizedKeys = []string{`command="sh" ` + line(alice)} },
		"two lines": func(s *agentv1.AccessSection) {
			s.Accounts[1].AuthorizedKeys = []string{line(alice) + "\n" + line(caPub)}
		},
		"a certificate as a CA":    func(s *agentv1.AccessSection) { s.TrustedUserCaKeys = []string{cert} },
		"a principal with a comma": func(s *agentv1.AccessSection) { s.Accounts[0].Principals = []string{"a,b"} },
		"too many keys":            func(s *agentv1.AccessSection) { s.RevokedKeys = make([]string, MaxKeys+1) },
	} {
		s := section(t)
		edit(s)
		if _, err := Plan(s, 1); err == nil {
			t.Errorf("%s was taken", what)
		}
	}
}

func TestTheReconcilerWritesAndPrunesUnderItsRoot(t *testing.T) {
	root := t.TempDir()
	r := New(DirWriter{Root: root}, nil)
	s := section(t)
	res, err := r.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{Generation: 2, Access: s}})
	if err != nil || res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("%v %v", res, err)
	}
	read := func(path string) string {
		data, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(filepath.Join(root, path))
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s is %v", path, fi.Mode())
		}
		return string(data)
	}
	if got := read(Principals + "/root"); got != "root\nbreakglass\n" {
		t.Fatalf("principals %q", got)
	}
	alice, _ := sshKey(t, "alice")
	if got := read(AuthorizedKeys + "/alice"); got != string(ssh.MarshalAuthorizedKey(alice)) {
		t.Fatalf("alice's keys %q (no comment copied)", got)
	}
	if conf := read(DropIn); !strings.Contains(conf, "TrustedUserCAKeys /etc/ssh/bcd/trusted_user_ca_keys\n") ||
		!strings.Contains(conf, "RevokedKeys /etc/ssh/bcd/revoked_keys.krl\n") {
		t.Fatalf("drop-in %q", conf)
	}
	for _, dir := range []string{Dir, AuthorizedKeys} {
		if fi, _ := os.Stat(filepath.Join(root, dir)); fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s is %v", dir, fi.Mode())
		}
	}
	// An account dropped is pruned; a refused section changes nothing.
	s.Accounts = s.Accounts[:1]
	if res, _ := r.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{Generation: 3, Access: s}}); res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatal(res)
	}
	if _, err := os.Stat(filepath.Join(root, AuthorizedKeys, "alice")); !os.IsNotExist(err) {
		t.Fatal("alice's keys are still there")
	}
	s.Accounts[0].Name = "Root"
	res, _ = r.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{Generation: 4, Access: s}})
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonAccessInvalid {
		t.Fatalf("%v", res)
	}
	read(Principals + "/root")
	// A group-writable directory is refused: sshd would not read under it.
	os.Chmod(filepath.Join(root, Dir), 0o775)
	s.Accounts[0].Name = "root"
	res, _ = r.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{Generation: 5, Access: s}})
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonAccessWriteFailed {
		t.Fatalf("%v", res)
	}
	os.Chmod(filepath.Join(root, Dir), 0o755)
	// No section: every file goes.
	if res, _ := r.Reconcile(context.Background(), converge.Input{Spec: &agentv1.NodeSpec{Generation: 6}}); res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatal(res)
	}
	for _, gone := range []string{DropIn, TrustedCAs, RevokedKeysFile, Principals + "/root"} {
		if _, err := os.Stat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Fatalf("%s is still there", gone)
		}
	}
}
