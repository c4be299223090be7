// Native fuzz target of config.toml, the one file bcd reads that a person
// edits: Parse refuses with ErrInvalid or yields a configuration; a value
// written with Quote reads back as itself; and a key set with Update on a
// file that parses leaves a file that parses, with the new value and every
// other key unchanged.

package config

import (
	"errors"
	"testing"
	"unicode/utf8"
)

func FuzzConfig(f *testing.F) {
	f.Add([]byte("gateway_url = \"https://127.0.0.1:7443\"\n# a comment\ndata_dir = \"data\"\n\n[update]\nkeys = []\n"), "node_1")
	f.Add([]byte("data_dir = '/var/lib/bcd'\nnode_id = \"n\" # joined\nsigned_specs = \"access\"\n"), "é\"\\\n\x7f")
	f.Add([]byte("data_dir = \"d\"\n[websocket]\nnode_id = 3\n"), "")
	f.Fuzz(func(t *testing.T, data []byte, value string) {
		c, err := Parse(data, "/etc/bcd/config.toml")
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("a refusal that is not ErrInvalid: %v", err)
		}
		if !utf8.ValidString(value) {
			return
		}
		quoted, err := Parse([]byte("data_dir = \"d\"\nnode_id = "+Quote(value)+"\n"), "/c.toml")
		if err != nil || quoted.NodeID != value {
			t.Fatalf("Quote(%q) reads back as %+v (%v)", value, quoted, err)
		}
		if c == nil {
			return
		}
		updated, err := Parse(Update(data, map[string]string{"node_id": value}, []string{"node_id"}), "/etc/bcd/config.toml")
		if err != nil {
			t.Fatalf("setting node_id broke the file: %v", err)
		}
		if updated.NodeID != value {
			t.Fatalf("node_id reads %q after setting %q", updated.NodeID, value)
		}
		updated.NodeID = c.NodeID
		if updated.GatewayURL != c.GatewayURL || updated.DataDir != c.DataDir || updated.SignedSpecs != c.SignedSpecs ||
			updated.JoinSigningPin != c.JoinSigningPin || updated.ServingCASPKIPin != c.ServingCASPKIPin {
			t.Fatalf("setting node_id changed another key: %+v, was %+v", updated, c)
		}
	})
}
