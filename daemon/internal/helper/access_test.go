// access.apply: a signed spec's access section written under access_root
// as sshd reads it, through the node's AccessWriter too; an unsigned,
// another node's, an older or an unreadable section refused.

package helper

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// accessSpec signs (with key, unless nil) a spec of node_1 with an access
// section whose account is account.
func accessSpec(t *testing.T, nodeID string, generation uint64, key ed25519.PrivateKey, account string) (json.RawMessage, *agentv1.Envelope) {
	t.Helper()
	section := &agentv1.AccessSection{Accounts: []*agentv1.SshAccount{{Name: account, Principals: []string{account}}}}
	payload, _ := proto.Marshal(&agentv1.NodeSpec{NodeId: nodeID, Generation: generation, Access: section})
	env := &pki.Envelope{PayloadType: pki.PayloadTypeNodeSpec, Payload: payload, Signatures: []pki.Signature{}}
	if key != nil {
		var err error
		if env, err = pki.SignEnvelope(rand.Reader, pki.PayloadTypeNodeSpec, payload, key); err != nil {
			t.Fatal(err)
		}
	}
	return env.JSON(), env.Proto()
}

func TestAccessApply(t *testing.T) {
	r := newRig(t, nil)
	if err := os.Mkdir(filepath.Join(r.dir, "access-root"), 0o755); err != nil {
		t.Fatal(err)
	}
	apply := func(raw json.RawMessage) error {
		return Call(context.Background(), r.socket, OpAccessApply, map[string]json.RawMessage{"spec": raw}, &AccessResult{})
	}
	principals := func(account string) string {
		data, _ := os.ReadFile(filepath.Join(r.dir, "access-root", "etc/ssh/bcd/auth_principals", account))
		return string(data)
	}
	unsigned, _ := accessSpec(t, "node_1", 2, nil, "root")
	wantRefused(t, apply(unsigned), "dsse-unsigned")
	other, _ := accessSpec(t, "node_2", 2, commandRoot, "root")
	wantRefused(t, apply(other), "spec-wrong-node")
	bad, _ := accessSpec(t, "node_1", 2, commandRoot, "Root")
	wantRefused(t, apply(bad), string(CodeArgs))
	// Through the node's writer: the signed spec is applied.
	_, env := accessSpec(t, "node_1", 3, commandRoot, "root")
	if err := (&HostUnits{Socket: r.socket}).AccessWriter().Write(context.Background(), env, nil); err != nil {
		t.Fatal(err)
	}
	if got := principals("root"); got != "root\n" {
		t.Fatalf("root's principals %q", got)
	}
	older, _ := accessSpec(t, "node_1", 2, commandRoot, "ops")
	wantRefused(t, apply(older), string(CodeGeneration))
	if principals("ops") != "" {
		t.Fatal("an older spec wrote")
	}
	// An unsigned spec (signedSpecs = access, access unchanged) sends nothing.
	_, plain := accessSpec(t, "node_1", 4, nil, "ops")
	if err := (&HostUnits{Socket: r.socket}).AccessWriter().Write(context.Background(), plain, nil); err != nil || principals("ops") != "" {
		t.Fatalf("an unsigned spec: %v", err)
	}
}

func TestAccessApplyBindsTheHostsNodeLikeHostApply(t *testing.T) {
	r := newRig(t, nil)
	if err := os.Mkdir(filepath.Join(r.dir, "access-root"), 0o755); err != nil {
		t.Fatal(err)
	}
	apply := func(raw json.RawMessage) error {
		return Call(context.Background(), r.socket, OpAccessApply, map[string]json.RawMessage{"spec": raw}, &AccessResult{})
	}
	first, _ := accessSpec(t, "node_1", 2, commandRoot, "root")
	if err := apply(first); err != nil {
		t.Fatal(err)
	}
	// The first signed apply bound node_1: the bcd user naming another node
	// in config.toml afterwards does not make root write that node's keys
	// for root.
	nodeConfig := filepath.Join(r.dir, "node", "config.toml")
	os.WriteFile(nodeConfig, []byte("data_dir = \"data\"\nnode_id = \"node_other\"\n"), 0o600)
	other, _ := accessSpec(t, "node_other", 1<<40, commandRoot, "root")
	wantRefused(t, apply(other), string(CodeNodeChanged))
	os.WriteFile(nodeConfig, []byte("data_dir = \"data\"\n"), 0o600)
	wantRefused(t, apply(other), "spec-wrong-node")
	again, _ := accessSpec(t, "node_1", 3, commandRoot, "root")
	if err := apply(again); err != nil {
		t.Fatalf("the bound node's spec: %v", err)
	}
}
