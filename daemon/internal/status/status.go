// Package status serves `bcd status` over a unix socket in the data dir
// (bcd.sock, mode 0600): a client connects and reads one JSON object.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// SocketName is the socket's file name in the data dir.
const SocketName = "bcd.sock"

// ErrNotRunning means no bcd answers on the socket.
var ErrNotRunning = errors.New("bcd is not running")

// Status is what `bcd status --json` prints.
type Status struct {
	NodeID            string   `json:"nodeId"`
	DaemonVersion     string   `json:"daemonVersion"`
	BootID            string   `json:"bootId"`
	JournalID         string   `json:"journalId"`
	Session           Session  `json:"session"`
	AppliedGeneration uint64   `json:"appliedGeneration"`
	Commands          Commands `json:"commands"`
}

// Session is the session part of the status.
type Session struct {
	// State is connected, connecting, disconnected or revoked.
	State         string `json:"state"`
	Epoch         uint64 `json:"epoch"`
	Gateway       string `json:"gateway"`
	ConnectedAtMs int64  `json:"connectedAtMs"`
	// Refused is the code of the gateway refusal that ended the last
	// attempt (for example cert-unknown, cert-validity), when one did.
	Refused string `json:"refused,omitempty"`
	// Transport is the connected session's: grpc or websocket (empty when
	// not connected).
	Transport string `json:"transport,omitempty"`
}

// Commands counts commands.
type Commands struct {
	// Running is how many run in this process.
	Running int `json:"running"`
	// Done is how many done results the journal keeps.
	Done int `json:"done"`
}

// Path is the socket of a data dir.
func Path(dataDir string) string { return filepath.Join(dataDir, SocketName) }

// Serve answers on the socket until ctx ends or stop is called (stop
// closes the listener before it returns, so the socket is free for the
// next bcd at once). A stale socket file (no one listening) is replaced; a
// live one is an error.
func Serve(ctx context.Context, path string, current func() *Status) (stop func(), err error) {
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("%s: another bcd answers there", path)
	}
	_ = os.Remove(path)
	restore := privateUmask()
	lis, err := net.Listen("unix", path)
	restore()
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, err
	}
	var once sync.Once
	stop = func() { once.Do(func() { lis.Close() }) }
	// A callback, not a goroutine waiting: a bcd sim process serves one per agent.
	context.AfterFunc(ctx, stop)
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				data, err := json.Marshal(current())
				if err == nil {
					_, _ = conn.Write(append(data, '\n'))
				}
			}()
		}
	}()
	return stop, nil
}

// Query reads the status of the bcd serving the socket at path.
func Query(path string) ([]byte, error) {
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w (no answer on %s: %w)", ErrNotRunning, path, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	data, err := io.ReadAll(conn)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%s answered something that is not JSON", path)
	}
	return data, nil
}
