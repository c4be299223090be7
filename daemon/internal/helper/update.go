// Self-update under the helper: update.state, update.prepare (the manifest
// verified with the helper's own [update] pins, the node's staged file
// checked against it), update.swap (the staged bytes copied into the other
// root-owned slot, checked again, upgrade.json, the entrypoint moved),
// update.confirm, update.rollback and update.settle, all through
// update.Slots with the node's user as the staged file's required owner.
// Client is the node's side: an update.Store over the socket.

package helper

import (
	"context"
	"encoding/json"

	"bcd/internal/pki"
	"bcd/internal/update"
)

// State is update.state's result.
type State struct {
	// Current is the slot the entrypoint names.
	Current string `json:"current"`
	// Entrypoint is the path the supervisor executes.
	Entrypoint string `json:"entrypoint"`
	// Pending is upgrade.json, if any.
	Pending *update.Record `json:"pending,omitempty"`
	// Failed lists the releases recorded as failed.
	Failed []update.Release `json:"failed"`
	// Installed is the confirmed release of the highest sequence, if any.
	Installed *update.Release `json:"installed,omitempty"`
}

// versionArgs names a version (confirm, settle).
type versionArgs struct {
	Version string `json:"version"`
}

// prepareArgs carries the signed manifest.
type prepareArgs struct {
	Manifest json.RawMessage `json:"manifest"`
}

func (s *Server) update(req Request) (any, error) {
	if s.slots == nil {
		return nil, refuse(CodeOp, "%s: this helper has no [update]", req.Op)
	}
	switch req.Op {
	case OpUpdateState:
		current, err := s.slots.Current()
		if err != nil {
			return nil, err
		}
		pending, err := s.slots.Pending()
		if err != nil {
			return nil, err
		}
		failed, err := s.slots.Failed()
		if err != nil {
			return nil, err
		}
		if failed == nil {
			failed = []update.Release{}
		}
		installed, err := s.slots.Installed()
		if err != nil {
			return nil, err
		}
		return &State{Current: current, Entrypoint: s.slots.Entrypoint(), Pending: pending, Failed: failed, Installed: installed}, nil
	case OpUpdatePrepare:
		var a prepareArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		env, err := pki.ParseEnvelopeJSON(a.Manifest)
		if err != nil {
			return nil, err
		}
		return s.slots.Prepare(env)
	case OpUpdateSwap:
		var a update.SwapRequest
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		return s.slots.Swap(a)
	case OpUpdateConfirm, OpUpdateSettle:
		var a versionArgs
		if err := decode(req, &a); err != nil {
			return nil, err
		}
		if req.Op == OpUpdateConfirm {
			return s.slots.Confirm(a.Version)
		}
		return s.slots.Settle(a.Version)
	case OpUpdateRollback:
		return s.slots.Rollback()
	}
	return nil, refuse(CodeOp, "unknown operation %q", req.Op)
}

// Client is an update.Store served by bcd helper.
type Client struct {
	// Socket is the helper's socket.
	Socket string
}

var _ update.Store = (*Client)(nil)

func (c *Client) call(op string, args, result any) error {
	return Call(context.Background(), c.Socket, op, args, result)
}

// State asks update.state.
func (c *Client) State() (*State, error) {
	st := &State{}
	if err := c.call(OpUpdateState, nil, st); err != nil {
		return nil, err
	}
	return st, nil
}

// Current is the helper's current slot.
func (c *Client) Current() (string, error) {
	st, err := c.State()
	if err != nil {
		return "", err
	}
	return st.Current, nil
}

// Entrypoint is the helper's entrypoint (its state's; the default layout's
// when the helper cannot be reached).
func (c *Client) Entrypoint() string {
	if st, err := c.State(); err == nil {
		return st.Entrypoint
	}
	return "/usr/local/lib/bcd/bcd"
}

// Pending is the helper's upgrade.json.
func (c *Client) Pending() (*update.Record, error) {
	st, err := c.State()
	if err != nil {
		return nil, err
	}
	return st.Pending, nil
}

// Installed is the helper's installed.json.
func (c *Client) Installed() (*update.Release, error) {
	st, err := c.State()
	if err != nil {
		return nil, err
	}
	return st.Installed, nil
}

// Failed is the helper's failed.json.
func (c *Client) Failed() ([]update.Release, error) {
	st, err := c.State()
	if err != nil {
		return nil, err
	}
	return st.Failed, nil
}

// Prepare asks update.prepare.
func (c *Client) Prepare(manifest *pki.Envelope) (*update.Release, error) {
	r := &update.Release{}
	if err := c.call(OpUpdatePrepare, prepareArgs{Manifest: manifest.JSON()}, r); err != nil {
		return nil, err
	}
	return r, nil
}

func (c *Client) record(op string, args any) (*update.Record, error) {
	r := &update.Record{}
	if err := c.call(op, args, r); err != nil {
		return nil, err
	}
	return r, nil
}

// Swap asks update.swap.
func (c *Client) Swap(req update.SwapRequest) (*update.Record, error) {
	return c.record(OpUpdateSwap, req)
}

// Confirm asks update.confirm.
func (c *Client) Confirm(version string) (*update.Record, error) {
	return c.record(OpUpdateConfirm, versionArgs{version})
}

// Rollback asks update.rollback.
func (c *Client) Rollback() (*update.Record, error) { return c.record(OpUpdateRollback, nil) }

// Settle asks update.settle.
func (c *Client) Settle(version string) (*update.Record, error) {
	return c.record(OpUpdateSettle, versionArgs{version})
}
