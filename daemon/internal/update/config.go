// The [update] table of config.toml (bcd node) and of the helper's
// helper.toml: the pinned release keys, the threshold, the lowest
// acceptable sequence, where the slots are, where a download is staged, and
// whether the slots belong to bcd helper.

package update

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"bcd/internal/config"
	"bcd/internal/pki"
	"github.com/BurntSushi/toml"
)

// Config is the [update] table.
type Config struct {
	// ReleaseKeys are the release keys, standard base64 of their SPKI DER.
	ReleaseKeys []string `toml:"release_keys"`
	// ReleaseKeyPins are the same keys' pins, in order; a key whose pin
	// differs is refused.
	ReleaseKeyPins []string `toml:"release_key_pins"`
	// Threshold is how many pinned keys must sign a manifest (default 1).
	Threshold int `toml:"threshold"`
	// MinSequence is the lowest acceptable release sequence.
	MinSequence uint64 `toml:"min_sequence"`
	// Dir holds the slots bcd-a and bcd-b, the entrypoint bcd and the
	// records. Empty: the directory of the running executable when it is
	// a slot (bcd runs as <dir>/bcd-a or <dir>/bcd-b).
	Dir string `toml:"dir"`
	// Staged is where the node writes a downloaded artifact before it is
	// prepared (default <data_dir>/update/bcd.staged).
	Staged string `toml:"staged"`
	// HelperSocket, when set, makes the slots bcd helper's: the node asks
	// the root helper on this unix socket to prepare, swap, confirm, roll
	// back and settle.
	HelperSocket string `toml:"helper_socket"`
}

// ParseConfig reads the [update] table as config.Config holds it (nil: no
// self-update configured, and a nil Config).
func ParseConfig(table map[string]any) (*Config, error) {
	if len(table) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(table); err != nil {
		return nil, refuseWith(CodeConfig, err, "[update]")
	}
	c := &Config{}
	md, err := toml.Decode(buf.String(), c)
	if err != nil {
		return nil, refuseWith(CodeConfig, err, "[update]")
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		return nil, refuse(CodeConfig, "[update] has unknown key %q", undecoded[0].String())
	}
	if key, ok := config.MixedCaseKey(md); ok {
		return nil, refuse(CodeConfig, "[update] has no key %q: keys are lowercase", key.String())
	}
	return c, nil
}

// Policy is the release policy of the pins: every key parsed and checked
// against its pin.
func (c *Config) Policy() (pki.ReleasePolicy, error) {
	if len(c.ReleaseKeys) == 0 {
		return pki.ReleasePolicy{}, refuse(CodeConfig, "[update] release_keys is empty")
	}
	if len(c.ReleaseKeyPins) != 0 && len(c.ReleaseKeyPins) != len(c.ReleaseKeys) {
		return pki.ReleasePolicy{}, refuse(CodeConfig, "[update] has %d release_keys and %d release_key_pins", len(c.ReleaseKeys), len(c.ReleaseKeyPins))
	}
	keys := make([]*pki.PublicKey, 0, len(c.ReleaseKeys))
	for i, b64 := range c.ReleaseKeys {
		der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil {
			return pki.ReleasePolicy{}, refuseWith(CodeConfig, err, "[update] release_keys[%d] is not base64", i)
		}
		key, err := pki.ParsePublicKey(der)
		if err != nil {
			return pki.ReleasePolicy{}, refuseWith(CodeConfig, err, "[update] release_keys[%d]", i)
		}
		if len(c.ReleaseKeyPins) > 0 && key.Pin() != c.ReleaseKeyPins[i] {
			return pki.ReleasePolicy{}, refuse(CodeConfig, "[update] release_keys[%d] has pin %s, release_key_pins[%d] is %s", i, key.Pin(), i, c.ReleaseKeyPins[i])
		}
		keys = append(keys, key)
	}
	threshold := c.Threshold
	if threshold <= 0 {
		threshold = 1
	}
	if threshold > len(keys) {
		return pki.ReleasePolicy{}, refuse(CodeConfig, "[update] threshold %d is more than the %d release keys", threshold, len(keys))
	}
	return pki.ReleasePolicy{Keys: keys, Threshold: threshold, MinSequence: c.MinSequence}, nil
}

// SlotsDir is Dir, or the directory of executable when it is a slot;
// CodeNotInstalled otherwise.
func (c *Config) SlotsDir(executable string) (string, error) {
	if c.Dir != "" {
		return c.Dir, nil
	}
	if executable == "" {
		var err error
		if executable, err = os.Executable(); err != nil {
			return "", refuseWith(CodeNotInstalled, err, "the running executable")
		}
	}
	if base := filepath.Base(executable); base == SlotA || base == SlotB {
		return filepath.Dir(executable), nil
	}
	return "", refuse(CodeNotInstalled, "%s is not a slot (%s or %s) and [update] dir is not set", executable, SlotA, SlotB)
}

// StagedPath is Staged, or <dataDir>/update/bcd.staged.
func (c *Config) StagedPath(dataDir string) string {
	if c.Staged != "" {
		return c.Staged
	}
	return filepath.Join(dataDir, "update", "bcd.staged")
}

// String renders the keys as a TOML [update] table (the install script and tests).
func (c *Config) String() string {
	var b strings.Builder
	b.WriteString("[update]\n")
	fmt.Fprintf(&b, "release_keys = %s\n", tomlStrings(c.ReleaseKeys))
	fmt.Fprintf(&b, "release_key_pins = %s\n", tomlStrings(c.ReleaseKeyPins))
	fmt.Fprintf(&b, "threshold = %d\n", c.Threshold)
	fmt.Fprintf(&b, "min_sequence = %d\n", c.MinSequence)
	for _, kv := range [][2]string{{"dir", c.Dir}, {"staged", c.Staged}, {"helper_socket", c.HelperSocket}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s = %s\n", kv[0], config.Quote(kv[1]))
		}
	}
	return b.String()
}

func tomlStrings(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = config.Quote(v)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
