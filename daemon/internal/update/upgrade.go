// The daemon.upgrade kind and what a starting bcd does about upgrade.json
// (docs/daemon.md, "Self-update in bcd"). Upgrade: the params' signed manifest
// verified with the [update] pins, the store's highest installed sequence
// and the wall clock (pki's order), this platform's artifact,
// the running version (SUCCEEDED at once, nothing swapped), the download
// over HTTP (release-download), its size and digest, the staged file, the
// store's prepare and swap; the caller then execs the entrypoint. Resume:
// the new version waits for its first Welcome (Watch: confirm, or roll back
// at the deadline); the previous version, started again after a rollback,
// records the release as failed and reports the command FAILED (an upgrade
// the daemon section asked for is reported by the section, section.go).
// Verify, Fetch and Install are the steps the daemon section shares.

package update

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"bcd/internal/config"
	"bcd/internal/pki"
)

// Kind, the command kind of a self-update, is generated from
// proto/kinds.toml into kinds_gen.go.

// Updater runs daemon.upgrade for one bcd.
type Updater struct {
	// Store holds the slots.
	Store Store
	// Policy pins the releases (the node's own [update]).
	Policy pki.ReleasePolicy
	// Staged is where a download is written.
	Staged string
	// Version is the running version.
	Version string
	// OS and Arch pick the artifact (default: this build's).
	OS, Arch string
	// HTTP downloads artifacts (default: a client with a 5-minute timeout).
	HTTP *http.Client
	// ConfirmTimeout bounds the new binary's wait for a Welcome (default 60 s).
	ConfirmTimeout time.Duration
	// Now is the wall clock, which a manifest's expiry is checked at (tests).
	Now func() time.Time
	// Log receives update.* lines.
	Log *slog.Logger

	// mu makes installs (stage, prepare, swap) one at a time: a command's
	// and the daemon section's share the staged file.
	mu sync.Mutex
}

func (u *Updater) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

// Output is a succeeded daemon.upgrade's output.
type Output struct {
	Version  string `json:"version"`
	Sequence uint64 `json:"sequence"`
	Previous string `json:"previous"`
	Slot     string `json:"slot"`
}

// JSON encodes the output.
func (o Output) JSON() []byte {
	data, _ := json.Marshal(o) // a struct of strings and a number always encodes
	return data
}

// Outcome is how Upgrade ended without a refusal.
type Outcome struct {
	// Output is set when nothing was swapped (the running version).
	Output []byte
	// Exec is the entrypoint to execute after a swap.
	Exec string
	// Record is upgrade.json after a swap.
	Record *Record
}

func (u *Updater) log() *slog.Logger { return orDiscard(u.Log) }

func (u *Updater) platform() (string, string) { return platform(u.OS, u.Arch) }

// ParseParams reads {"manifest": <DSSE JSON envelope>}.
func ParseParams(params []byte) (*pki.Envelope, error) {
	var p struct {
		Manifest json.RawMessage `json:"manifest"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, refuseWith(CodeParams, err, "params are not a JSON object")
	}
	if len(p.Manifest) == 0 || string(p.Manifest) == "null" {
		return nil, refuse(CodeParams, "params have no manifest")
	}
	env, err := pki.ParseEnvelopeJSON(p.Manifest)
	if err != nil {
		return nil, err
	}
	return env, nil
}

// Upgrade does a daemon.upgrade's work up to the exec. Every refusal is an
// error whose text is the command's reason ("<code>: <detail>").
func (u *Updater) Upgrade(ctx context.Context, commandID string, params []byte) (*Outcome, error) {
	env, err := ParseParams(params)
	if err != nil {
		return nil, err
	}
	manifest, artifact, err := u.Verify(env)
	if err != nil {
		return nil, err
	}
	if manifest.Version == u.Version {
		current, err := u.Store.Current()
		if err != nil {
			return nil, err
		}
		u.log().Info("update.already_running", "command_id", commandID, "version", u.Version)
		return &Outcome{Output: Output{Version: u.Version, Sequence: manifest.Sequence, Previous: u.Version, Slot: current}.JSON()}, nil
	}
	if err := u.notPending(); err != nil {
		return nil, err
	}
	data, err := u.Fetch(ctx, artifact)
	if err != nil {
		return nil, err
	}
	return u.Install(SwapRequest{CommandID: commandID}, env, data)
}

// Verify checks a signed manifest in pki's order with the pins, the
// store's highest installed sequence and the wall clock, and picks this
// platform's artifact.
func (u *Updater) Verify(env *pki.Envelope) (*pki.Manifest, *pki.Artifact, error) {
	policy := u.Policy
	if installed, err := u.Store.Installed(); err != nil {
		return nil, nil, err
	} else if installed != nil {
		policy.InstalledSequence = installed.Sequence
	}
	manifest, err := pki.VerifyManifest(env, policy, u.now())
	if err != nil {
		return nil, nil, err
	}
	artifact, err := manifest.Artifact(u.platform())
	if err != nil {
		return nil, nil, err
	}
	return manifest, artifact, nil
}

// notPending refuses while an upgrade waits for its confirmation.
func (u *Updater) notPending() error {
	pending, err := u.Store.Pending()
	if err != nil {
		return err
	}
	if pending != nil {
		return refuse(CodePending, "upgrade to %s (%s) waits for its confirmation", pending.Version, pending.Origin())
	}
	return nil
}

// Fetch downloads an artifact and checks its size and digest.
func (u *Updater) Fetch(ctx context.Context, a *pki.Artifact) ([]byte, error) {
	data, err := u.download(ctx, a)
	if err != nil {
		return nil, err
	}
	if err := a.Check(data); err != nil {
		return nil, err
	}
	return data, nil
}

// Install stages data, the verified artifact of env, has the store prepare
// it and swaps (req names what asked: a command or a spec generation; the
// running version and the confirmation timeout are the Updater's). One
// install runs at a time.
func (u *Updater) Install(req SwapRequest, env *pki.Envelope, data []byte) (*Outcome, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.notPending(); err != nil {
		return nil, err
	}
	if err := u.stage(data); err != nil {
		return nil, err
	}
	defer os.Remove(u.Staged)
	if _, err := u.Store.Prepare(env); err != nil {
		return nil, err
	}
	timeout := u.ConfirmTimeout
	if timeout <= 0 {
		timeout = DefaultConfirmTimeout
	}
	req.Previous, req.ConfirmTimeoutMs = u.Version, timeout.Milliseconds()
	rec, err := u.Store.Swap(req)
	if err != nil {
		return nil, err
	}
	u.log().Info("update.exec", "command_id", rec.CommandID, "generation", rec.Generation, "version", rec.Version,
		"slot", rec.Slot, "entrypoint", u.Store.Entrypoint())
	return &Outcome{Exec: u.Store.Entrypoint(), Record: rec}, nil
}

// download fetches the artifact (at most its size plus one byte).
func (u *Updater) download(ctx context.Context, a *pki.Artifact) ([]byte, error) {
	client := u.HTTP
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Minute}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return nil, refuseWith(CodeDownload, err, "%s", a.URL)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, refuseWith(CodeDownload, err, "GET %s", a.URL)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, refuse(CodeDownload, "GET %s: %s", a.URL, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(a.Size)+1))
	if err != nil {
		return nil, refuseWith(CodeDownload, err, "GET %s", a.URL)
	}
	u.log().Info("update.downloaded", "url", a.URL, "bytes", len(data))
	return data, nil
}

// stage writes the staged file (0600, in a 0700 directory).
func (u *Updater) stage(data []byte) error {
	if err := os.MkdirAll(filepath.Dir(u.Staged), 0o700); err != nil {
		return err
	}
	if err := os.Remove(u.Staged); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return config.WriteFileAtomic(u.Staged, data, 0o600)
}

// Resumed is what a starting bcd must do about upgrade.json.
type Resumed struct {
	// Await is set when this bcd is the new version: confirm it on the
	// first Welcome, roll back at its deadline.
	Await *Watch
	// Failed is set when this bcd is the previous version after a
	// rollback: the release is recorded as failed and the command must be
	// reported FAILED with Reason.
	Failed *Record
	// Reason is the failed command's reason.
	Reason string
}

// Resume reads upgrade.json at start.
func (u *Updater) Resume() (*Resumed, error) {
	r, err := u.Store.Pending()
	if err != nil || r == nil {
		return &Resumed{}, err
	}
	if r.Version == u.Version && !r.RolledBack {
		u.log().Info("update.awaiting_welcome", "version", r.Version, "command_id", r.CommandID, "deadline", r.Deadline().UTC().Format(time.RFC3339Nano))
		return &Resumed{Await: &Watch{u: u, rec: r}}, nil
	}
	if !r.RolledBack {
		if r, err = u.Store.Rollback(); err != nil {
			return nil, err
		}
	}
	if _, err := u.Store.Settle(r.Version); err != nil {
		return nil, err
	}
	return &Resumed{Failed: r, Reason: fmt.Sprintf("%s: %s never connected", CodeRollback, r.Version)}, nil
}

// Watch is the new version's wait for its first Welcome.
type Watch struct {
	u       *Updater
	rec     *Record
	mu      sync.Mutex
	settled bool
}

// Record is upgrade.json as read at start.
func (w *Watch) Record() *Record { return w.rec }

// Deadline is when the upgrade is rolled back without a Welcome.
func (w *Watch) Deadline() time.Time { return w.rec.Deadline() }

// Welcomed confirms the upgrade; it returns the command's output, or nil
// when the watch already ended.
func (w *Watch) Welcomed() ([]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.settled {
		return nil, nil
	}
	r, err := w.u.Store.Confirm(w.rec.Version)
	if err != nil {
		return nil, err
	}
	w.settled = true
	return Output{Version: r.Version, Sequence: r.Sequence, Previous: r.Previous, Slot: r.Slot}.JSON(), nil
}

// Expire rolls back (the entrypoint names the previous slot again) and
// returns the entrypoint to execute, or "" when the watch already ended.
func (w *Watch) Expire() (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.settled {
		return "", nil
	}
	if _, err := w.u.Store.Rollback(); err != nil {
		return "", err
	}
	w.settled = true
	w.u.log().Warn("update.never_connected", "version", w.rec.Version, "command_id", w.rec.CommandID, "rolled_back_to", w.rec.PreviousSlot)
	return w.u.Store.Entrypoint(), nil
}
