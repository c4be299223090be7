// What an access section asks of sshd, as files (docs/daemon.md,
// "Access"): each account's authorized keys and certificate principals,
// the trusted user CAs, the KRL, the sandbox CAs, and the sshd drop-in
// that points sshd at them. Plan checks every field a control plane sent
// (names, key lines, bounds) before anything is written; a section it
// refuses changes nothing.

package access

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"bcd/internal/proto/agentv1"
	"golang.org/x/crypto/ssh"
)

// Where the files go, relative to the machine's root (the host's /, the
// fakehw root).
const (
	Dir             = "etc/ssh/bcd"
	DropIn          = "etc/ssh/sshd_config.d/bcd-access.conf"
	AuthorizedKeys  = Dir + "/authorized_keys"
	Principals      = Dir + "/auth_principals"
	TrustedCAs      = Dir + "/trusted_user_ca_keys"
	SandboxCAs      = Dir + "/sandbox_user_ca_keys"
	RevokedKeysFile = Dir + "/revoked_keys.krl"
)

// Bounds of a section (a larger one is refused, never cut).
const (
	MaxAccounts    = 64
	MaxKeys        = 256 // per account, and CAs, and revoked keys per section
	MaxPrincipals  = 64  // per account
	MaxSerials     = 4096
	MaxLineBytes   = 16 << 10
	maxSerialsCAs  = 16
	principalBytes = 128
)

// accountName is a local account's name as useradd takes it.
var accountName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// dropIn is the sshd drop-in (Debian's sshd_config includes
// /etc/ssh/sshd_config.d/*.conf).
const dropIn = `# Written by bcd from the NodeSpec access section; do not edit.
AuthorizedKeysFile .ssh/authorized_keys /` + AuthorizedKeys + `/%u
AuthorizedPrincipalsFile /` + Principals + `/%u
TrustedUserCAKeys /` + TrustedCAs + `
RevokedKeys /` + RevokedKeysFile + `
`

// Files are the access files by path (relative to the root), and the
// accounts they name.
type Files struct {
	Files    map[string][]byte
	Accounts []string
}

// Plan checks a section and lays out its files; generation versions the
// KRL. A nil section is none: no file.
func Plan(section *agentv1.AccessSection, generation uint64) (*Files, error) {
	if section == nil {
		return &Files{Files: map[string][]byte{}}, nil
	}
	f := &Files{Files: map[string][]byte{DropIn: []byte(dropIn)}}
	if len(section.GetAccounts()) > MaxAccounts {
		return nil, fmt.Errorf("%d accounts, at most %d", len(section.GetAccounts()), MaxAccounts)
	}
	seen := map[string]bool{}
	for _, a := range section.GetAccounts() {
		if err := planAccount(f, a, seen); err != nil {
			return nil, err
		}
	}
	sort.Strings(f.Accounts)
	for path, lines := range map[string][]string{TrustedCAs: section.GetTrustedUserCaKeys(), SandboxCAs: section.GetSandboxUserCaKeys()} {
		keys, err := parseKeys(lines, false)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		f.Files[path] = authorizedLines(keys)
	}
	revoked, err := parseKeys(section.GetRevokedKeys(), true)
	if err != nil {
		return nil, fmt.Errorf("revoked keys: %w", err)
	}
	serials, err := parseSerials(section.GetRevokedSerials())
	if err != nil {
		return nil, err
	}
	f.Files[RevokedKeysFile] = KRL(generation, revoked, serials)
	return f, nil
}

// planAccount adds an account's authorized keys and principals.
func planAccount(f *Files, a *agentv1.SshAccount, seen map[string]bool) error {
	name := a.GetName()
	if !accountName.MatchString(name) {
		return fmt.Errorf("account %q: not an account name ([a-z_][a-z0-9_-]{0,31})", name)
	}
	if seen[name] {
		return fmt.Errorf("account %q is listed twice", name)
	}
	seen[name] = true
	keys, err := parseKeys(a.GetAuthorizedKeys(), false)
	if err != nil {
		return fmt.Errorf("account %s: %w", name, err)
	}
	if len(a.GetPrincipals()) > MaxPrincipals {
		return fmt.Errorf("account %s: %d principals, at most %d", name, len(a.GetPrincipals()), MaxPrincipals)
	}
	var principals strings.Builder
	for _, p := range a.GetPrincipals() {
		if p == "" || len(p) > principalBytes || strings.ContainsAny(p, " \t\r\n,#\x00") || strings.ContainsFunc(p, isControl) {
			return fmt.Errorf("account %s: principal %q is not one sshd reads", name, p)
		}
		principals.WriteString(p + "\n")
	}
	f.Accounts = append(f.Accounts, name)
	f.Files[AuthorizedKeys+"/"+name] = authorizedLines(keys)
	f.Files[Principals+"/"+name] = []byte(principals.String())
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// parseKeys reads public key lines (no options, no newline); a
// certificate is taken only where certs is true (a revoked one revokes
// its key).
func parseKeys(lines []string, certs bool) ([]ssh.PublicKey, error) {
	if len(lines) > MaxKeys {
		return nil, fmt.Errorf("%d keys, at most %d", len(lines), MaxKeys)
	}
	keys := make([]ssh.PublicKey, 0, len(lines))
	for i, line := range lines {
		if len(line) > MaxLineBytes || strings.ContainsAny(line, "\r\n") {
			return nil, fmt.Errorf("key %d: not one line of at most %d bytes", i, MaxLineBytes)
		}
		key, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
		switch {
		case err != nil:
			return nil, fmt.Errorf("key %d: %w", i, err)
		case len(options) > 0 || len(rest) > 0:
			return nil, fmt.Errorf("key %d: options or more than one key on the line", i)
		}
		if cert, ok := key.(*ssh.Certificate); ok {
			if !certs {
				return nil, fmt.Errorf("key %d: a certificate, not a key", i)
			}
			key = cert.Key
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// parseSerials reads the revoked serials of each CA.
func parseSerials(list []*agentv1.RevokedSerials) ([]RevokedSerials, error) {
	if len(list) > maxSerialsCAs {
		return nil, fmt.Errorf("revoked serials of %d CAs, at most %d", len(list), maxSerialsCAs)
	}
	out := make([]RevokedSerials, 0, len(list))
	for i, s := range list {
		ca, err := parseKeys([]string{s.GetCaKey()}, false)
		if err != nil {
			return nil, fmt.Errorf("revoked serials %d: the CA: %w", i, err)
		}
		if len(s.GetSerials()) > MaxSerials {
			return nil, fmt.Errorf("revoked serials %d: %d serials, at most %d", i, len(s.GetSerials()), MaxSerials)
		}
		out = append(out, RevokedSerials{CA: ca[0], Serials: s.GetSerials()})
	}
	return out, nil
}

// authorizedLines writes keys one a line, without their comments (a
// comment a control plane sent is not needed by sshd and is not copied).
func authorizedLines(keys []ssh.PublicKey) []byte {
	var b strings.Builder
	for _, k := range keys {
		b.Write(ssh.MarshalAuthorizedKey(k))
	}
	return []byte(b.String())
}
