// Host units: host.apply takes a NodeSpec envelope signed by a command root
// of the helper's command_roots_dir (PEM public keys, root's and neither
// group- nor world-writable), refuses an unsigned or tampered one (pki's
// DSSE codes), one for another node than this host's (spec-wrong-node),
// and a generation below the last applied (host-generation),
// writes the host section's units into unit_dir (names bcd-*.service and
// kin only: host-unit-name), removes the units of the last apply that are
// gone, and reloads systemd when it runs. host.start starts one unit the
// last apply wrote (else host-unit-unknown) with systemctl start.
//
// This host's node id is [helper] node_id (root's) when set. Otherwise it
// is bound on trust on first use: the first apply takes node_id from the
// node's config.toml and records it in root's host-units.json, and from
// then on that recorded id is this host's. The bcd user writes config.toml,
// so a node id it names later is never taken: one that differs from the
// recorded id is host-node-changed, and only root rebinds the host (by
// setting [helper] node_id, or removing host-units.json after a deliberate
// re-join). Before the first apply, an id config.toml does not give is
// host-node-unknown.

package helper

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"

	"bcd/internal/config"
	"bcd/internal/pki"
	"github.com/BurntSushi/toml"
)

// unitName is what host units may be called.
var unitName = regexp.MustCompile(`^bcd-[a-z0-9][a-z0-9-]*\.(service|mount|timer|slice|target|path|socket)$`)

// hostState is <state_dir>/host-units.json.
type hostState struct {
	Generation uint64   `json:"generation"`
	Units      []string `json:"units"`
	// NodeID is the node the applied units are for: bound by the first
	// apply, the host's node id from then on (the package comment).
	NodeID string `json:"node_id,omitempty"`
}

// loadRoots reads the PEM public keys of dir (none when it is missing).
func loadRoots(dir string) ([]*pki.PublicKey, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var roots []*pki.PublicKey
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pem") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 {
			return nil, fmt.Errorf("%w: %s must be a regular file neither group- nor world-writable", ErrConfig, path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		block, _ := pem.Decode(data)
		if block == nil || block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("%w: %s is not a PEM PUBLIC KEY", ErrConfig, path)
		}
		key, err := pki.ParsePublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
		}
		roots = append(roots, key)
	}
	return roots, nil
}

// hostArgs carries the signed NodeSpec.
type hostArgs struct {
	Spec json.RawMessage `json:"spec"`
}

// HostResult is host.apply's result.
type HostResult struct {
	Generation uint64   `json:"generation"`
	Written    []string `json:"written"`
	Removed    []string `json:"removed"`
	Reloaded   bool     `json:"reloaded"`
}

func (s *Server) hostApply(ctx context.Context, req Request) (any, error) {
	spec, state, nodeID, err := s.signedSpec(req)
	if err != nil {
		return nil, err
	}
	statePath := s.hostStatePath()
	if spec.GetGeneration() < state.Generation {
		return nil, refuse(CodeGeneration, "generation %d is below the applied %d", spec.GetGeneration(), state.Generation)
	}
	units := spec.GetHost().GetUnits()
	names := make([]string, 0, len(units))
	for _, u := range units {
		if !unitName.MatchString(u.GetName()) {
			return nil, refuse(CodeUnitName, "%q is not a host unit name (bcd-<name>.service, .mount, .timer, …)", u.GetName())
		}
		names = append(names, u.GetName())
	}
	res := &HostResult{Generation: spec.GetGeneration(), Written: []string{}, Removed: []string{}}
	if err := os.MkdirAll(s.cfg.Helper.UnitDir, 0o755); err != nil {
		return nil, err
	}
	for _, u := range units {
		if err := config.WriteFileAtomic(filepath.Join(s.cfg.Helper.UnitDir, u.GetName()), u.GetContent(), 0o644); err != nil {
			return nil, err
		}
		res.Written = append(res.Written, u.GetName())
	}
	for _, old := range state.Units {
		if !slices.Contains(names, old) && unitName.MatchString(old) {
			if err := os.Remove(filepath.Join(s.cfg.Helper.UnitDir, old)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			res.Removed = append(res.Removed, old)
		}
	}
	sort.Strings(names)
	if err := os.MkdirAll(s.cfg.Helper.StateDir, 0o755); err != nil {
		return nil, err
	}
	data, _ := json.Marshal(hostState{Generation: spec.GetGeneration(), Units: names, NodeID: nodeID})
	if err := config.WriteFileAtomic(statePath, data, 0o644); err != nil {
		return nil, err
	}
	// systemd runs when /run/systemd/system exists (sd_booted).
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		if out, err := exec.CommandContext(ctx, s.cfg.Helper.Systemctl, "daemon-reload").CombinedOutput(); err != nil {
			return nil, &Error{Code: CodeCommand, Reason: "systemctl daemon-reload: " + strings.TrimSpace(string(out)), Err: err}
		}
		res.Reloaded = true
	}
	if state.NodeID == "" && s.cfg.Helper.NodeID == "" {
		s.log.Info("host.node_bound", "node_id", nodeID, "state", statePath)
	}
	s.log.Info("host.applied", "generation", res.Generation, "written", res.Written, "removed", res.Removed, "reloaded", res.Reloaded)
	return res, nil
}

// hostStatePath is <state_dir>/host-units.json.
func (s *Server) hostStatePath() string {
	return filepath.Join(s.cfg.Helper.StateDir, "host-units.json")
}

// loadHostState reads what the last host.apply wrote (nothing before the first).
func (s *Server) loadHostState() (hostState, error) {
	path := s.hostStatePath()
	state := hostState{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return state, nil
	}
	if err != nil {
		return state, err
	}
	if err := json.Unmarshal(data, &state); err != nil {
		return state, fmt.Errorf("%s: %w", path, err)
	}
	return state, nil
}

// HostStartArgs names the unit host.start starts.
type HostStartArgs struct {
	// Name is the unit's whole name, as host.apply wrote it (bcd-<name>.service, …).
	Name string `json:"name"`
}

// hostStart runs `systemctl start <name>` for a unit the last host.apply
// wrote. systemctl start waits for a Type=oneshot unit's commands and
// fails when they do, so a failing unit is refused helper-command with
// systemctl's words as the reason.
func (s *Server) hostStart(ctx context.Context, req Request) (any, error) {
	var a HostStartArgs
	if err := decode(req, &a); err != nil {
		return nil, err
	}
	if !unitName.MatchString(a.Name) {
		return nil, refuse(CodeUnitName, "%q is not a host unit name (bcd-<name>.service, .mount, .timer, …)", a.Name)
	}
	state, err := s.loadHostState()
	if err != nil {
		return nil, err
	}
	if !slices.Contains(state.Units, a.Name) {
		return nil, refuse(CodeUnitUnknown, "%s is not a unit of the last host.apply (generation %d)", a.Name, state.Generation)
	}
	if _, err := run(ctx, s.cfg.Helper.Systemctl, "start", a.Name); err != nil {
		return nil, err
	}
	s.log.Info("host.started", "unit", a.Name, "generation", state.Generation)
	return map[string]string{"unit": a.Name}, nil
}

// maxNodeConfig is the most of the node's config.toml the helper reads.
const maxNodeConfig = 1 << 20

// hostNodeID is this host's node id (the package comment): [helper]
// node_id; else the one the first apply recorded in state, refusing
// host-node-changed when config.toml now names another; else, for the
// first apply, config.toml's (host-node-unknown without one).
func (s *Server) hostNodeID(state hostState) (string, error) {
	if id := s.cfg.Helper.NodeID; id != "" {
		return id, nil
	}
	fromConfig, err := s.nodeConfigID()
	if state.NodeID == "" {
		return fromConfig, err
	}
	if err == nil && fromConfig != state.NodeID {
		// config.toml's id is the bcd user's word: it is not echoed.
		return "", refuse(CodeNodeChanged, "this host was bound to node %q by its first host.apply (%s), and %s now names another node: "+
			"a node id the node's user writes is not taken (after a deliberate re-join, root sets [helper] node_id or removes %s)",
			state.NodeID, s.hostStatePath(), s.cfg.Helper.NodeConfig, s.hostStatePath())
	}
	return state.NodeID, nil
}

// nodeConfigID is node_id of the node's config.toml: a regular file (opened
// without following a link: the bcd user writes it, so its content is
// never echoed either), else host-node-unknown.
func (s *Server) nodeConfigID() (string, error) {
	path := s.cfg.Helper.NodeConfig
	unknown := func(why string) (string, error) {
		return "", refuse(CodeNodeUnknown, "no [helper] node_id, and %s %s", path, why)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return unknown("is a symbolic link")
	}
	if err != nil {
		return unknown("cannot be read")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxNodeConfig {
		return unknown("is not a regular file of at most 1 MiB")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxNodeConfig+1))
	if err != nil || len(data) > maxNodeConfig {
		return unknown("cannot be read")
	}
	var node struct {
		NodeID string `toml:"node_id"`
	}
	if _, err := toml.Decode(string(data), &node); err != nil {
		return unknown("does not parse as TOML")
	}
	if node.NodeID == "" {
		return unknown("has no node_id (the node has not joined)")
	}
	return node.NodeID, nil
}
