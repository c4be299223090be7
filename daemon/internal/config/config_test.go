// Tests of config.toml: loading, relative data dirs, and in-place updates
// that keep what a person wrote.

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadResolvesARelativeDataDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	text := "gateway_url = \"https://127.0.0.1:4443\"\ndata_dir = \"data\"\nnode_id = \"\"\n[update]\nthreshold = 2\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != filepath.Join(dir, "data") || c.ServerName() != "127.0.0.1" || c.JWKPath() != filepath.Join(dir, JWKFileName) {
		t.Fatalf("got %+v (server name %q)", c, c.ServerName())
	}
}

func TestLoadRefusesBadValues(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"no data dir":  "gateway_url = \"https://x:1\"\n",
		"signed specs": "data_dir = \"/d\"\nsigned_specs = \"never\"\n",
		"not toml":     "data_dir = \n",
		// Keys are case-sensitive: Update would add node_id beside it.
		"a key in another case":            "data_dir = \"/d\"\nnodE_id = \"n\"\n",
		"a table in another case":          "data_dir = \"/d\"\n[Websocket]\nurl = \"wss://x:1/v1/session\"\n",
		"a table key in another case":      "data_dir = \"/d\"\n[websocket]\nURL = \"wss://x:1/v1/session\"\n",
		"a key folded from another letter": "data_dir = \"/d\"\n\"ſigned_specs\" = \"access\"\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".toml")
		os.WriteFile(path, []byte(text), 0o644)
		if _, err := Load(path); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The [update] table is a map that internal/update reads and checks.
func TestTheUpdateTableIsLeftToItsOwnReader(t *testing.T) {
	c, err := Parse([]byte("data_dir = \"/d\"\n[update]\nKeys = []\nRollbackAfter = \"1m\"\n"), "/c.toml")
	if err != nil || len(c.Update) != 2 || c.Update["RollbackAfter"] != "1m" {
		t.Fatalf("%+v, %v", c, err)
	}
}

func TestSetKeepsOtherLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	text := "# written by hand\ngateway_url = \"https://a:1\"\nnode_id = \"\"\n\n[update]\nthreshold = 2\n"
	os.WriteFile(path, []byte(text), 0o644)
	if err := Set(path, map[string]string{"node_id": "node_1", "data_dir": `C:\x "y"`}, []string{"data_dir"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# written by hand\ngateway_url = \"https://a:1\"\nnode_id = \"node_1\"\n\ndata_dir = \"C:\\\\x \\\"y\\\"\"\n[update]\nthreshold = 2\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	c, err := Load(path)
	if err != nil || c.NodeID != "node_1" || c.DataDir != `C:\x "y"` && !strings.HasSuffix(c.DataDir, `C:\x "y"`) {
		t.Fatalf("reload: %+v %v", c, err)
	}
}

func TestSetCreatesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := Set(path, map[string]string{"gateway_url": "https://g:1", "data_dir": "/d"}, []string{"gateway_url", "data_dir"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "gateway_url = \"https://g:1\"\ndata_dir = \"/d\"\n" {
		t.Fatalf("got %q", got)
	}
}

func TestTheWebsocketTable(t *testing.T) {
	dir := t.TempDir()
	load := func(text string) (*Config, error) {
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, []byte("data_dir = \"/d\"\n"+text), 0o644); err != nil {
			t.Fatal(err)
		}
		return Load(path)
	}
	c, err := load("[websocket]\nurl = \"wss://gw.example:8443/v1/session\"\n")
	if err != nil {
		t.Fatal(err)
	}
	renew, err := c.RenewURL()
	if err != nil || renew != "https://gw.example:8443/v1/renew" {
		t.Fatalf("renew URL %q, %v", renew, err)
	}
	if c.UsesGRPC() || !c.UsesWebsocket() || c.ServerName() != "gw.example" {
		t.Fatalf("grpc %v, websocket %v, server name %q", c.UsesGRPC(), c.UsesWebsocket(), c.ServerName())
	}
	c, err = load("gateway_url = \"https://a:1\"\n[websocket]\nurl = \"wss://b:2/v1/session\"\n")
	if err != nil || !c.UsesGRPC() || !c.UsesWebsocket() || c.ServerName() != "a" {
		t.Fatalf("both: %+v, %v", c, err)
	}
	for name, text := range map[string]string{
		"not wss":     "[websocket]\nurl = \"ws://b:2/v1/session\"\n",
		"no host":     "[websocket]\nurl = \"wss:///v1/session\"\n",
		"unknown key": "[websocket]\nurl = \"wss://b:2/v1/session\"\nproxy = \"x\"\n",
	} {
		if _, err := load(text); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}
