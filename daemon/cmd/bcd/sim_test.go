// A test of bcd sim's per-agent configuration: the base config.toml with
// the agent's own data dir and no node id, every other key kept, the
// gateway list (gateway_url and gateway_urls) among them.

package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"bcd/internal/config"
)

func TestASimAgentKeepsTheBaseConfigurationsGateways(t *testing.T) {
	base := []byte("gateway_url = \"https://a:1\"\ngateway_urls = [\"https://a:1\", \"https://b:2\"]\ngateway_server_name = \"gw.dev.local\"\ndata_dir = \"/base\"\nnode_id = \"node_base\"\n\n[update]\nthreshold = 1\n")
	dir := filepath.Join(t.TempDir(), "sim", "3")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path, err := simConfig(dir, base, []byte("{}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Gateways(), []string{"https://a:1", "https://b:2"}) || c.DataDir != dir || c.NodeID != "" || c.ServerName() != "gw.dev.local" {
		t.Fatalf("agent config %+v (gateways %q)", c, c.Gateways())
	}
}
