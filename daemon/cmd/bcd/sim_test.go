// A test of bcd sim's per-agent configuration: the base config.toml with
// the agent's own data dir and no node id, every other key kept, and with
// several gateways the base's list turned so that agent i starts on
// gateway i mod n.

package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"bcd/internal/config"
)

func TestSimAgentsAreSpreadOverTheBaseConfigurationsGateways(t *testing.T) {
	base := []byte("gateway_url = \"https://a:1\"\ngateway_urls = [\"https://a:1\", \"https://b:2\", \"https://c:3\"]\ngateway_server_name = \"gw.dev.local\"\ndata_dir = \"/base\"\nnode_id = \"node_base\"\n\n[update]\nthreshold = 1\n")
	baseConfig, err := config.Parse(base, "base.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]string{
		0: {"https://a:1", "https://b:2", "https://c:3"},
		1: {"https://b:2", "https://c:3", "https://a:1"},
		5: {"https://c:3", "https://a:1", "https://b:2"},
	}
	for i, gateways := range want {
		dir := filepath.Join(t.TempDir(), "sim", "x")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path, err := simConfig(dir, i, baseConfig.Gateways(), base, []byte("{}\n"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Gateways(), gateways) || c.GatewayURL != gateways[0] || c.DataDir != dir || c.NodeID != "" || c.ServerName() != "gw.dev.local" {
			t.Fatalf("agent %d config %+v (gateways %q)", i, c, c.Gateways())
		}
	}
}

func TestASimAgentOfOneGatewayKeepsTheBaseConfiguration(t *testing.T) {
	base := []byte("gateway_url = \"https://a:1\"\ngateway_server_name = \"gw.dev.local\"\ndata_dir = \"/base\"\nnode_id = \"node_base\"\n")
	dir := filepath.Join(t.TempDir(), "sim", "3")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path, err := simConfig(dir, 3, []string{"https://a:1"}, base, []byte("{}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Gateways(), []string{"https://a:1"}) || c.DataDir != dir || c.NodeID != "" {
		t.Fatalf("agent config %+v", c)
	}
}
