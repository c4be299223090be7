// Package config reads bcd's config.toml (docs/daemon.md, "config.toml") and updates it in
// place: top-level keys are rewritten line by line so that comments and
// tables a person wrote survive, and every write is atomic (a temporary
// file, fsync, rename, fsync of the directory).
package config

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// FileName is the configuration's usual name.
const FileName = "config.toml"

// JWKFileName is the join-encryption key's file, next to config.toml.
const JWKFileName = "join-encryption.jwk"

// DefaultPath is where bcd looks without --config.
const DefaultPath = "/etc/bcd/config.toml"

// ErrInvalid marks a configuration that parses but cannot be used.
var ErrInvalid = errors.New("invalid configuration")

// Config is config.toml.
type Config struct {
	// GatewayURL is the gateway, https://host:port (http:// for h2c in fakehw builds).
	GatewayURL string `toml:"gateway_url"`
	// GatewayURLs are the other gateways bcd fails over to (gateways.go):
	// the list is gateway_url, then these that are not it.
	GatewayURLs []string `toml:"gateway_urls"`
	// GatewayServerName is the name the serving certificate must carry
	// (default: the URL's host).
	GatewayServerName string `toml:"gateway_server_name"`
	// ServingCASPKIPin pins the CA that issued the gateway's certificate.
	ServingCASPKIPin string `toml:"serving_ca_spki_pin"`
	// JoinSigningPin pins the JoinService's signing key.
	JoinSigningPin string `toml:"join_signing_pin"`
	// JoinSigningKey is that key itself (standard base64 of its SPKI DER),
	// which must match JoinSigningPin: a pin alone cannot verify a signature.
	JoinSigningKey string `toml:"join_signing_key"`
	// JoinEncryptionPin pins the key join tokens are sealed to.
	JoinEncryptionPin string `toml:"join_encryption_pin"`
	// DataDir holds the identity, the journal and the status socket; a
	// relative path is relative to the configuration's directory.
	DataDir string `toml:"data_dir"`
	// NodeID is set by a successful join.
	NodeID string `toml:"node_id"`
	// SignedSpecs is "always" or "access" (docs/formats.md, "NodeSpecs"); empty means
	// "always" when bcd has command roots.
	SignedSpecs string `toml:"signed_specs"`
	// DevInsecureH2C dials the gateway over cleartext HTTP/2 (fakehw builds only).
	DevInsecureH2C bool `toml:"dev_insecure_h2c"`
	// Update is the [update] table of self-update, kept raw here and parsed by
	// update.ParseConfig (docs/daemon.md, "config.toml").
	Update map[string]any `toml:"update"`
	// Websocket is the [websocket] table: the Session over a WebSocket and
	// renewal over HTTPS, alone (no gateway_url) or as the fallback of the
	// gRPC gateway (docs/protocol.md, "WebSocket transport").
	Websocket Websocket `toml:"websocket"`
	// Instances is the [instances] table (host builds: the VPS runtimes).
	Instances *Instances `toml:"instances"`

	// Path is the file this configuration was read from.
	Path string `toml:"-"`
}

// Websocket is the [websocket] table.
type Websocket struct {
	// URL is the WebSocket session, wss://host:port/v1/session; renewal
	// goes to https://host:port/v1/renew on the same listener.
	URL string `toml:"url"`
}

// WebsocketPath and RenewPath are the dev stack's paths on its HTTPS
// listener; RenewURL replaces the first with the second.
const (
	WebsocketPath = "/v1/session"
	RenewPath     = "/v1/renew"
)

// Load reads and checks a configuration file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse reads and checks the bytes of a configuration file found at path
// (relative data directories are resolved against it).
func Parse(data []byte, path string) (*Config, error) {
	c := &Config{}
	md, err := toml.Decode(string(data), c)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	for _, key := range md.Undecoded() {
		if len(key) > 0 && key[0] == "websocket" {
			return nil, fmt.Errorf("%w: %s: [websocket] has unknown key %q", ErrInvalid, path, key.String())
		}
	}
	if key, ok := MixedCaseKey(md, "update"); ok {
		return nil, fmt.Errorf("%w: %s: there is no key %q: keys are lowercase", ErrInvalid, path, key.String())
	}
	if err := c.Websocket.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	if err := c.checkGateways(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
	}
	c.Path = path
	if c.DataDir == "" {
		return nil, fmt.Errorf("%w: %s: data_dir is not set", ErrInvalid, path)
	}
	if !filepath.IsAbs(c.DataDir) {
		c.DataDir = filepath.Join(filepath.Dir(path), c.DataDir)
	}
	switch c.SignedSpecs {
	case "", "always", "access":
	default:
		return nil, fmt.Errorf("%w: %s: signed_specs %q is neither \"always\" nor \"access\"", ErrInvalid, path, c.SignedSpecs)
	}
	return c, nil
}

// MixedCaseKey returns a key of md that the decoder took for a field
// although it is not spelled as one: BurntSushi/toml falls back to matching
// a field's name with Unicode case folding ("Node_ID" reads as node_id, and
// "ſigned_specs", with a long s, as signed_specs). TOML keys are
// case-sensitive and every key bcd reads is lowercase ASCII (letters,
// digits, '_'), so such a key is a mistake to refuse: Update, which sets a
// key by its exact name, would add a second node_id beside one the decoder
// would go on reading. Keys under the tables named in skip are maps another
// reader checks (config.toml's [update]).
func MixedCaseKey(md toml.MetaData, skip ...string) (toml.Key, bool) {
	undecoded := map[string]bool{}
	for _, key := range md.Undecoded() {
		undecoded[key.String()] = true
	}
	for _, key := range md.Keys() {
		if undecoded[key.String()] {
			continue
		}
		named := key
		if slices.Contains(skip, key[0]) {
			named = key[:1]
		}
		for _, part := range named {
			if strings.ContainsFunc(part, notInKeys) {
				return key, true
			}
		}
	}
	return nil, false
}

// notInKeys reports whether r is outside the letters of bcd's keys.
func notInKeys(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' }

// check accepts an empty table or a wss:// URL with a host.
func (w Websocket) check() error {
	if w.URL == "" {
		return nil
	}
	u, err := url.Parse(w.URL)
	if err != nil {
		return fmt.Errorf("[websocket] url %q: %w", w.URL, err)
	}
	if u.Scheme != "wss" || u.Host == "" {
		return fmt.Errorf("[websocket] url %q is not wss://host[:port]/path", w.URL)
	}
	return nil
}

// UsesGRPC says whether the gRPC gateway is configured (gateway_url).
func (c *Config) UsesGRPC() bool { return c.GatewayURL != "" }

// UsesWebsocket says whether the WebSocket session is configured.
func (c *Config) UsesWebsocket() bool { return c.Websocket.URL != "" }

// RenewURL is POST /v1/renew on the WebSocket session's listener:
// https://host:port/v1/renew for wss://host:port/v1/session (any other
// path of the session is replaced the same way).
func (c *Config) RenewURL() (string, error) {
	u, err := url.Parse(c.Websocket.URL)
	if err != nil || c.Websocket.URL == "" {
		return "", fmt.Errorf("%w: no usable [websocket] url", ErrInvalid)
	}
	u.Scheme, u.Path, u.RawPath, u.RawQuery = "https", RenewPath, "", ""
	return u.String(), nil
}

// JWKPath is where join-encryption.jwk sits: next to the configuration.
func (c *Config) JWKPath() string { return filepath.Join(filepath.Dir(c.Path), JWKFileName) }

// ServerName is the name the gateway's certificate is checked for (the
// WebSocket listener's too: it has the same serving certificate); by
// default the host of gateway_url, or of the [websocket] url without one.
func (c *Config) ServerName() string {
	if c.GatewayServerName != "" {
		return c.GatewayServerName
	}
	gateway := c.GatewayURL
	if gateway == "" {
		gateway = strings.TrimPrefix(c.Websocket.URL, "wss://")
	}
	host := strings.TrimPrefix(strings.TrimPrefix(gateway, "https://"), "http://")
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	return strings.Trim(host, "[]")
}

// Set writes the top-level keys of values into the file at path (created
// when missing), replacing each key's line or adding it before the first
// table, and leaves every other line alone. Values are TOML strings.
func Set(path string, values map[string]string, order []string) error {
	return SetEncoded(path, quoteAll(values), order)
}

// SetEncoded is Set of values already written as TOML (Quote, QuoteArray).
func SetEncoded(path string, encoded map[string]string, order []string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return WriteFileAtomic(path, UpdateEncoded(data, encoded, order), 0o644)
}

// Update is Set on the bytes of a file: each key's line replaced, or added
// (in order, then the rest) before the first table.
func Update(data []byte, values map[string]string, order []string) []byte {
	return UpdateEncoded(data, quoteAll(values), order)
}

// quoteAll is values as TOML basic strings.
func quoteAll(values map[string]string) map[string]string {
	encoded := make(map[string]string, len(values))
	for key, v := range values {
		encoded[key] = Quote(v)
	}
	return encoded
}

// UpdateEncoded is Update of values already written as TOML, each on one
// line; a value replaced goes with every line it spanned (span.go).
func UpdateEncoded(data []byte, values map[string]string, order []string) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	done := map[string]bool{}
	firstTable := -1 // the lines shrink as values across lines are replaced
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if strings.HasPrefix(trimmed, "[") {
			firstTable = i
			break
		}
		key, _, ok := strings.Cut(trimmed, "=")
		if !ok || strings.HasPrefix(trimmed, "#") {
			continue
		}
		key = strings.TrimSpace(key)
		end := valueEnd(lines, i)
		if v, want := values[key]; want {
			lines = slices.Replace(lines, i, end+1, key+" = "+v+"\n")
			done[key] = true
		} else {
			i = end
		}
	}
	if firstTable < 0 {
		firstTable = len(lines)
	}
	var added []string
	for _, key := range order {
		if v, ok := values[key]; ok && !done[key] {
			added = append(added, key+" = "+v+"\n")
			done[key] = true
		}
	}
	for key, v := range values {
		if !done[key] {
			added = append(added, key+" = "+v+"\n")
		}
	}
	if firstTable > 0 && firstTable <= len(lines) && len(added) > 0 && !strings.HasSuffix(lines[firstTable-1], "\n") {
		lines[firstTable-1] += "\n"
	}
	out := append(append(append([]string{}, lines[:firstTable]...), added...), lines[firstTable:]...)
	return []byte(strings.Join(out, ""))
}

// Quote returns s as a TOML basic string.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// QuoteArray returns items as a TOML array of basic strings, on one line.
func QuoteArray(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = Quote(item)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory, fsyncs it, renames it over path and fsyncs the directory, so a
// crash leaves either the old or the new file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteFileAtomicFrom(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFileAtomicFrom is WriteFileAtomic of what write writes; where write
// fails, path is left as it was and its error returned.
func WriteFileAtomicFrom(path string, perm os.FileMode, write func(io.Writer) error) error {
	if err := replaceFile(path, perm, write); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// File is one file of WriteFilesAtomic.
type File struct {
	Name string // within the directory
	Data []byte
	Perm os.FileMode
}

// WriteFilesAtomic writes each file into dir as WriteFileAtomic does, in
// order, and fsyncs the directory once at the end: a crash leaves each
// file either old or new (which of them is new, if any, it does not say).
func WriteFilesAtomic(dir string, files ...File) error {
	for _, f := range files {
		if err := replaceFile(filepath.Join(dir, f.Name), f.Perm, func(w io.Writer) error {
			_, err := w.Write(f.Data)
			return err
		}); err != nil {
			return err
		}
	}
	return SyncDir(dir)
}

// replaceFile writes a temporary file beside path, fsyncs it and renames
// it over path (the directory is the caller's to fsync).
func replaceFile(path string, perm os.FileMode, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	err = write(tmp)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name()) // after a rename there is nothing to remove
	}
	return err
}

// SyncDir fsyncs a directory so that a rename or a new file in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
