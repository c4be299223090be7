// Tests of the status socket: one JSON object per connection, mode 0600,
// and a clear error when nothing answers.

package status

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
)

func TestServeAndQuery(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "bcd-status-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := Path(dir)
	if _, err := Query(path); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("nothing running: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := Serve(ctx, path, func() *Status {
		return &Status{NodeID: "node_1", Session: Session{State: "connected", Epoch: 2}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	data, err := Query(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(data, &got)
	if got["nodeId"] != "node_1" || got["session"].(map[string]any)["state"] != "connected" {
		t.Fatalf("status %s", data)
	}
	for _, key := range []string{"daemonVersion", "bootId", "journalId", "appliedGeneration", "commands"} {
		if _, ok := got[key]; !ok {
			t.Errorf("no %s in %s", key, data)
		}
	}
	if _, err := Serve(ctx, path, nil); err == nil {
		t.Fatal("a second server took a live socket")
	}
	// Once stop returned, the next bcd (a restart) takes the socket at once.
	stop()
	again, err := Serve(ctx, path, func() *Status { return &Status{NodeID: "node_1"} })
	if err != nil {
		t.Fatalf("the socket after stop: %v", err)
	}
	again()
}
