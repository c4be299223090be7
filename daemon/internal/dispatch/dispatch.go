// Package dispatch decides and runs commands (docs/protocol.md, "Commands";
// docs/daemon.md, "The acceptance order"). Acceptance order: with command roots a missing or bad
// signature is FAILED "BAD_SIGNATURE: <pki code>"; a command id the journal
// knows is answered from the journal (duplicate delivery); another node's
// command or a kind this machine does not run is UNSUPPORTED; min_generation
// above the applied spec defers it and sends a SpecRequest; past not_after
// (on the gateway's clock) it is EXPIRED; no free lane credit is BUSY; a
// destructive command outside an approved batch is FAILED
// "BATCH_UNAPPROVED: …" or "UNBATCHED_LIMIT: …". An accepted command is
// journaled before any side effect, running{boot_id} right before it runs,
// and its terminal update (with a node-signed NodeStatement{command_result})
// is journaled together with the done record. What a kind does is its
// Kind's, in the Registry (kind.go): this package names no kind.
package dispatch

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// ReasonRebooted is the reason a self-terminating command SUCCEEDED with
// across its reboot. The refusal reasons (ReasonBadSignature, …) are
// generated from proto/refusals.toml into refusals_gen.go.
const ReasonRebooted = "rebooted"

// Trust is what the dispatcher needs of signed intent.
type Trust interface {
	// Roots are the command roots (none: commands are not signed).
	Roots() []*pki.PublicKey
	// Quorum is the destructive-command quorum (nil: none) and the trust domain.
	Quorum() (*agentv1.Quorum, string)
}

// Machine is what the dispatcher needs of the machine (machine.Machine has
// it): the boot id journaled with running, and fakehw's instrumentation.
type Machine interface {
	// BootID identifies the current boot.
	BootID() string
	// Executed records one real execution of a command (fakehw counts them).
	Executed(commandID string) error
	// Hold is how long a command with these params stays RUNNING before
	// its work (fakehw's "hold_ms"; zero elsewhere).
	Hold(params []byte) time.Duration
}

// Config wires a dispatcher.
type Config struct {
	// NodeID is this node.
	NodeID string
	// Key signs command results.
	Key crypto.Signer
	// Journal records commands and events.
	Journal *journal.Journal
	// Machine gives the boot id and the execution instrumentation.
	Machine Machine
	// Kinds are the kinds this node runs (nil: none).
	Kinds *Registry
	// Trust gives the roots and the quorum.
	Trust Trust
	// Applied is the applied spec generation.
	Applied func() uint64
	// ServerNow is the gateway's clock (expiry, batch approvals).
	ServerNow func() time.Time
	// Notify says the journal has new events.
	Notify func()
	// SendControl sends a control frame (SpecRequest).
	SendControl func(*agentv1.NodeFrame)
	// Now is the local clock (tests).
	Now func() time.Time
	// Log receives dispatch.* lines.
	Log *slog.Logger
}

// Dispatcher decides and runs commands.
type Dispatcher struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	credits  int
	running  map[string]context.CancelCauseFunc
	deferred map[string]*agentv1.CommandDelivery
	wg       sync.WaitGroup
	stopped  bool
}

// New returns a dispatcher with no lane credits until SetCredits.
func New(cfg Config) *Dispatcher {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ServerNow == nil {
		cfg.ServerNow = cfg.Now
	}
	if cfg.Applied == nil {
		cfg.Applied = func() uint64 { return 0 }
	}
	for _, f := range []*func(){&cfg.Notify} {
		if *f == nil {
			*f = func() {}
		}
	}
	if cfg.SendControl == nil {
		cfg.SendControl = func(*agentv1.NodeFrame) {}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{cfg: cfg, log: log, running: map[string]context.CancelCauseFunc{}, deferred: map[string]*agentv1.CommandDelivery{}}
}

// SetCredits sets the lane credits of the current session (the Welcome's).
func (d *Dispatcher) SetCredits(n uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.credits = int(n)
}

// Deliver handles one CommandDelivery.
func (d *Dispatcher) Deliver(delivery *agentv1.CommandDelivery) {
	env := pki.EnvelopeFromProto(delivery.GetCommand())
	cmd := &agentv1.Command{}
	if roots := d.cfg.Trust.Roots(); len(roots) > 0 {
		payload, err := env.Verify(pki.PayloadTypeCommand, roots, 1)
		if err != nil {
			// The id is unverified: report on it, keep nothing.
			if env.PayloadType != pki.PayloadTypeCommand || proto.Unmarshal(env.Payload, cmd) != nil || cmd.GetId() == "" {
				d.log.Warn("dispatch.dropped", "reason", "an unverifiable command without a readable id", "code", string(pki.CodeOf(err)))
				return
			}
			d.refuse(cmd, agentv1.CommandState_FAILED, ReasonBadSignature+": "+string(pki.CodeOf(err)), false)
			return
		}
		if err := proto.Unmarshal(payload, cmd); err != nil {
			d.log.Warn("dispatch.dropped", "reason", "a signed command that does not decode", "err", err)
			return
		}
	} else if env.PayloadType != pki.PayloadTypeCommand || proto.Unmarshal(env.Payload, cmd) != nil {
		d.log.Warn("dispatch.dropped", "reason", "not a command", "payload_type", env.PayloadType)
		return
	}
	if cmd.GetId() == "" {
		d.log.Warn("dispatch.dropped", "reason", "a command without an id")
		return
	}
	d.decide(cmd, env, delivery)
}

// decide runs the acceptance order after the signature.
func (d *Dispatcher) decide(cmd *agentv1.Command, env *pki.Envelope, delivery *agentv1.CommandDelivery) {
	id := cmd.GetId()
	rec, err := d.cfg.Journal.Command(id)
	if err != nil {
		d.log.Error("dispatch.journal_failed", "command_id", id, "err", err)
		return
	}
	if rec != nil {
		d.duplicate(rec, cmd)
		return
	}
	if cmd.GetNodeId() != d.cfg.NodeID {
		d.refuse(cmd, agentv1.CommandState_UNSUPPORTED, fmt.Sprintf("%s: command for node %q", pki.CodeCommandWrongNode, cmd.GetNodeId()), true)
		return
	}
	kind, known := d.cfg.Kinds.Lookup(cmd.GetKind())
	if !known {
		d.refuse(cmd, agentv1.CommandState_UNSUPPORTED, unsupported(cmd.GetKind()), true)
		return
	}
	if applied := d.cfg.Applied(); cmd.GetMinGeneration() > applied {
		d.mu.Lock()
		d.deferred[id] = delivery
		d.mu.Unlock()
		d.log.Info("dispatch.deferred", "command_id", id, "min_generation", cmd.GetMinGeneration(), "applied_generation", applied)
		d.cfg.SendControl(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_SpecRequest{SpecRequest: &agentv1.SpecRequest{MinGeneration: cmd.GetMinGeneration()}}})
		return
	}
	if now := d.cfg.ServerNow().UnixMilli(); cmd.GetNotAfterMs() != 0 && now > cmd.GetNotAfterMs() {
		d.refuse(cmd, agentv1.CommandState_EXPIRED, fmt.Sprintf("%s: not after %d, now %d", pki.CodeCommandExpired, cmd.GetNotAfterMs(), now), true)
		return
	}
	d.mu.Lock()
	busy := len(d.running) >= d.credits
	d.mu.Unlock()
	if busy {
		d.log.Info("dispatch.busy", "command_id", id, "running", d.Running())
		d.emit(id, cmd.GetKind(), agentv1.CommandState_BUSY, "no free lane credit")
		return
	}
	var unbatched []int64
	if cmd.GetDestructive() {
		var reason string
		unbatched, reason = d.quorum(cmd, env, delivery)
		if reason != "" {
			d.refuse(cmd, agentv1.CommandState_FAILED, reason, true)
			return
		}
	}
	d.accept(cmd, kind, delivery, unbatched)
}

// accept journals an accepted command that runs at once, with the
// unbatched times to record (nil: none), and starts it (unless bcd is
// stopping: then nothing is journaled, and the gateway delivers it again). Accepted and
// running{boot_id} are one transaction, with the ACCEPTED and RUNNING
// events: both are written before any side effect, nothing happens between
// them that a crash could cut (the command starts at once), and after a
// crash a command accepted and one running in an earlier boot are settled
// alike (docs/daemon.md, "Duplicate delivery"), so the one commit is as
// safe as the two it replaces. The execution is counted, then the events
// go out (begun).
func (d *Dispatcher) accept(cmd *agentv1.Command, kind Kind, delivery *agentv1.CommandDelivery, unbatched []int64) {
	id := cmd.GetId()
	data, err := proto.Marshal(delivery)
	if err != nil {
		return
	}
	rec := &journal.CommandRecord{
		ID: id, Kind: cmd.GetKind(), State: journal.Running, RetrySafe: cmd.GetRetrySafe() && kind.RetrySafe,
		SelfTerminating: kind.SelfTerminating, AcceptedAtMs: d.cfg.Now().UnixMilli(), Delivery: data,
		BootID: d.cfg.Machine.BootID(),
	}
	accepted, err := d.update(id, cmd.GetKind(), agentv1.CommandState_ACCEPTED, "", nil)
	if err != nil {
		return
	}
	running, err := d.update(id, cmd.GetKind(), agentv1.CommandState_RUNNING, "", nil)
	if err != nil {
		return
	}
	s, ok := d.take(id)
	if !ok {
		d.log.Info("dispatch.not_started", "command_id", id, "reason", "shutting down")
		return
	}
	err = d.cfg.Journal.Update(func(tx *journal.Tx) error {
		if err := tx.PutCommand(rec); err != nil {
			return err
		}
		if unbatched != nil {
			b, _ := json.Marshal(unbatched)
			if err := tx.Put(unbatchedKey, b); err != nil {
				return err
			}
		}
		if _, err := tx.Append(accepted); err != nil {
			return err
		}
		_, err := tx.Append(running)
		return err
	})
	if err != nil {
		d.release(id, s)
		d.log.Error("dispatch.journal_failed", "command_id", id, "err", err)
		return
	}
	d.log.Info("dispatch.accepted", "command_id", id, "kind", cmd.GetKind(), "retry_safe", rec.RetrySafe, "kind_destructive", kind.Destructive)
	d.begun(rec)
	d.launch(s, rec, cmd, true)
}

// duplicate answers a command id the journal knows.
func (d *Dispatcher) duplicate(rec *journal.CommandRecord, cmd *agentv1.Command) {
	d.mu.Lock()
	_, inProcess := d.running[rec.ID]
	d.mu.Unlock()
	switch {
	case rec.State == journal.Done:
		u := &agentv1.CommandUpdate{}
		if err := proto.Unmarshal(rec.Update, u); err != nil {
			d.log.Error("dispatch.journal_failed", "command_id", rec.ID, "err", err)
			return
		}
		d.log.Info("dispatch.duplicate", "command_id", rec.ID, "answer", "stored result", "state", u.GetState().String())
		if _, err := d.cfg.Journal.Append(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_CommandUpdate{CommandUpdate: u}}); err != nil {
			d.log.Error("dispatch.journal_failed", "command_id", rec.ID, "err", err)
			return
		}
		d.cfg.Notify()
	case inProcess:
		d.log.Info("dispatch.duplicate", "command_id", rec.ID, "answer", "re-attach")
		d.emit(rec.ID, rec.Kind, agentv1.CommandState_RUNNING, "")
	case rec.SelfTerminating && rec.State == journal.Running && rec.BootID != d.cfg.Machine.BootID():
		d.log.Info("dispatch.duplicate", "command_id", rec.ID, "answer", "rebooted", "boot_id", rec.BootID)
		if err := d.finish(rec, agentv1.CommandState_SUCCEEDED, ReasonRebooted, nil, true); err != nil {
			d.log.Error("dispatch.journal_failed", "command_id", rec.ID, "err", err)
		}
	case rec.RetrySafe && d.retrySafe(rec.Kind):
		d.log.Info("dispatch.duplicate", "command_id", rec.ID, "answer", "re-execute after a crash")
		d.start(rec, cmd)
	default:
		d.log.Info("dispatch.duplicate", "command_id", rec.ID, "answer", ReasonInterrupted)
		if err := d.finish(rec, agentv1.CommandState_FAILED, ReasonInterrupted, nil, true); err != nil {
			d.log.Error("dispatch.journal_failed", "command_id", rec.ID, "err", err)
		}
	}
}

// retrySafe says whether the registered kind may run again after a crash.
func (d *Dispatcher) retrySafe(name string) bool {
	k, ok := d.cfg.Kinds.Lookup(name)
	return ok && k.RetrySafe
}

// GenerationApplied reconsiders the commands deferred for a generation.
func (d *Dispatcher) GenerationApplied(generation uint64) {
	d.mu.Lock()
	var ready []*agentv1.CommandDelivery
	for id, delivery := range d.deferred {
		cmd := &agentv1.Command{}
		if proto.Unmarshal(delivery.GetCommand().GetPayload(), cmd) == nil && cmd.GetMinGeneration() <= generation {
			ready = append(ready, delivery)
			delete(d.deferred, id)
		}
	}
	d.mu.Unlock()
	for _, delivery := range ready {
		d.Deliver(delivery)
	}
}

// Deferred is the number of commands waiting for a spec.
func (d *Dispatcher) Deferred() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.deferred)
}
