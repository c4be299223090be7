// The NodeSpec daemon section's reconciler (docs/daemon.md, "The daemon
// section"): bcd converges to the release the section names by the steps of
// daemon.upgrade. The section's signed manifest is verified with the
// [update] pins (Updater.Verify) and must name the section's version and
// sequence; the artifact is downloaded in the background (Fetch), so a pass
// never waits on the network, and the pass that finds it downloaded stages,
// prepares and swaps it (Install, the record naming the spec generation)
// and, once the pass is persisted, hands the entrypoint to the agent, which
// execs it. The new binary is confirmed by its first Welcome, after which
// the agent passes the section again: APPLIED. A build that never connects
// is rolled back by the watch the command's upgrade uses; the previous
// binary, started again, finds the release in failed.json: FAILED
// RolledBack, and that release is never tried again.

package update

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"bcd/internal/converge"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// Reasons of the daemon section's status (SectionStatus.reason).
const (
	// ReasonNotConfigured: the section names another release and this bcd
	// cannot update itself (no [update], or not behind an entrypoint). FAILED.
	ReasonNotConfigured = "UpdateNotConfigured"
	// ReasonReleaseRefused: the manifest is missing, does not verify under
	// the pins, is not the section's release, or its artifact's bytes are
	// not the signed ones. FAILED.
	ReasonReleaseRefused = "ReleaseRefused"
	// ReasonRolledBack: the release was rolled back (it never connected);
	// it is not tried again. FAILED.
	ReasonRolledBack = "RolledBack"
	// ReasonUpgradeFailed: staging, preparing or swapping was refused. FAILED.
	ReasonUpgradeFailed = "UpgradeFailed"
	// ReasonDownloading: the artifact is being downloaded. PROGRESSING.
	ReasonDownloading = "Downloading"
	// ReasonDownloadFailed: the download failed; it is tried again. PROGRESSING.
	ReasonDownloadFailed = "DownloadFailed"
	// ReasonUpgradePending: another upgrade waits for its confirmation. PROGRESSING.
	ReasonUpgradePending = "UpgradePending"
	// ReasonSwapped: the release is in the other slot; bcd execs it. PROGRESSING.
	ReasonSwapped = "Swapped"
	// ReasonAwaitingWelcome: the new binary runs and waits for its first
	// Welcome (or its rollback deadline). PROGRESSING.
	ReasonAwaitingWelcome = "AwaitingWelcome"
	// ReasonRetrying: the slots could not be read; tried again. PROGRESSING.
	ReasonRetrying = "Retrying"
)

// DefaultSectionRetry is when a failed download or an unreadable store is
// tried again, and how often a section waiting for another upgrade looks.
const DefaultSectionRetry = 10 * time.Second

// SectionConfig wires the daemon section's reconciler.
type SectionConfig struct {
	// Updater does the work (nil: no [update]; only the running version
	// converges).
	Updater *Updater
	// Version is the running version.
	Version string
	// Exec hands the swapped entrypoint to the agent, which execs it.
	Exec func(path string)
	// Wake asks for a pass of the section (a download ended).
	Wake func()
	// Retry is DefaultSectionRetry when 0.
	Retry time.Duration
	// Log receives update.* lines.
	Log *slog.Logger
}

// SectionReconciler reconciles the daemon section.
type SectionReconciler struct {
	cfg SectionConfig

	mu    sync.Mutex
	fetch *fetch
}

var _ converge.Reconciler = (*SectionReconciler)(nil)

// fetch is one background download of a release's artifact.
type fetch struct {
	key    string // version and digest
	cancel context.CancelFunc
	done   bool
	data   []byte
	err    error
}

// NewSection returns the daemon section's reconciler.
func NewSection(cfg SectionConfig) *SectionReconciler {
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultSectionRetry
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &SectionReconciler{cfg: cfg}
}

// Section is "daemon".
func (r *SectionReconciler) Section() string { return converge.SectionDaemon }

// Reconcile converges to the section's release one step per pass: verify,
// download (in the background), install and exec, await the Welcome.
func (r *SectionReconciler) Reconcile(ctx context.Context, in converge.Input) (converge.Result, error) {
	sec := in.Spec.GetDaemon()
	running := r.cfg.Version
	if sec.GetVersion() == "" {
		r.drop()
		return appliedResult("no daemon section: bcd runs %s", running), nil
	}
	u := r.cfg.Updater
	if u == nil {
		r.drop()
		if sec.GetVersion() == running {
			return appliedResult("bcd runs %s", running), nil
		}
		return failedResult(ReasonNotConfigured, "the section names %s; bcd runs %s and has no [update]", sec.GetVersion(), running), nil
	}
	pending, err := u.Store.Pending()
	if err != nil {
		return r.progressing(ReasonRetrying, r.cfg.Retry, "reading the slots: %v", err), nil
	}
	if sec.GetVersion() == running {
		r.drop()
		if pending != nil && pending.Version == running && !pending.RolledBack {
			wait := max(time.Until(pending.Deadline()), time.Second)
			return r.progressing(ReasonAwaitingWelcome, wait, "bcd runs %s from %s and waits for its first Welcome", running, pending.Slot), nil
		}
		return appliedResult("bcd runs %s (sequence %d)", running, sec.GetSequence()), nil
	}
	if pending != nil {
		return r.progressing(ReasonUpgradePending, r.cfg.Retry, "the upgrade to %s (%s) waits for its confirmation", pending.Version, pending.Origin()), nil
	}
	artifact, res, refused := r.check(u, sec)
	if refused {
		r.drop()
		return res, nil
	}
	return r.step(ctx, u, in.Spec.GetGeneration(), sec, artifact)
}

// check verifies the section's release and picks its artifact; refused is
// set with the section's status when this bcd cannot update itself, the
// release was rolled back before, or its manifest does not verify or
// names another release.
func (r *SectionReconciler) check(u *Updater, sec *agentv1.DaemonSection) (artifact *pki.Artifact, res converge.Result, refused bool) {
	if _, err := u.Store.Current(); err != nil {
		return nil, failedResult(ReasonNotConfigured, "the section names %s; bcd runs %s: %v", sec.GetVersion(), r.cfg.Version, err), true
	}
	failed, err := u.Store.Failed()
	if err != nil {
		return nil, r.progressing(ReasonRetrying, r.cfg.Retry, "reading the slots: %v", err), true
	}
	if slices.ContainsFunc(failed, func(f Release) bool { return f.Version == sec.GetVersion() }) {
		return nil, failedResult(ReasonRolledBack, "%s (sequence %d) was rolled back: it never connected; bcd runs %s",
			sec.GetVersion(), sec.GetSequence(), r.cfg.Version), true
	}
	if sec.GetManifest() == nil {
		return nil, failedResult(ReasonReleaseRefused, "the section names %s without its signed manifest", sec.GetVersion()), true
	}
	m, artifact, err := u.Verify(pki.EnvelopeFromProto(sec.GetManifest()))
	if err != nil {
		return nil, failedResult(ReasonReleaseRefused, "%v", err), true
	}
	if m.Version != sec.GetVersion() || m.Sequence != sec.GetSequence() {
		return nil, failedResult(ReasonReleaseRefused, "the manifest is %s (sequence %d), the section names %s (sequence %d)",
			m.Version, m.Sequence, sec.GetVersion(), sec.GetSequence()), true
	}
	return artifact, converge.Result{}, false
}

// step starts the download, waits for it, or installs what it fetched.
func (r *SectionReconciler) step(ctx context.Context, u *Updater, generation uint64, sec *agentv1.DaemonSection, artifact *pki.Artifact) (converge.Result, error) {
	env := pki.EnvelopeFromProto(sec.GetManifest())
	key := sec.GetVersion() + "/" + artifact.SHA256
	r.mu.Lock()
	f := r.fetch
	if f == nil || f.key != key {
		r.dropLocked()
		f = r.start(ctx, u, key, artifact)
	}
	done, data, ferr := f.done, f.data, f.err
	if done {
		r.fetch = nil
	}
	r.mu.Unlock()
	switch {
	case !done:
		return r.progressing(ReasonDownloading, 4*r.cfg.Retry, "downloading %s from %s", sec.GetVersion(), artifact.URL), nil
	case ferr != nil && CodeOf(ferr) == CodeDownload:
		return r.progressing(ReasonDownloadFailed, r.cfg.Retry, "%v", ferr), nil
	case ferr != nil:
		return failedResult(ReasonReleaseRefused, "%v", ferr), nil
	}
	out, err := u.Install(SwapRequest{Generation: generation}, env, data)
	clear(data)
	switch {
	case CodeOf(err) == CodePending:
		return r.progressing(ReasonUpgradePending, r.cfg.Retry, "%v", err), nil
	case CodeOf(err) == CodeReleaseFailed:
		return failedResult(ReasonRolledBack, "%v", err), nil
	case err != nil:
		return failedResult(ReasonUpgradeFailed, "%v", err), nil
	}
	r.cfg.Log.Info("update.section_swapped", "generation", generation, "version", out.Record.Version, "slot", out.Record.Slot)
	res := r.progressing(ReasonSwapped, r.cfg.Retry, "%s is in %s; bcd execs it", out.Record.Version, out.Record.Slot)
	res.Then = func() {
		if r.cfg.Exec != nil {
			r.cfg.Exec(out.Exec)
		}
	}
	return res, nil
}

// start downloads the artifact in the background and wakes the section
// when it is done. The caller holds r.mu.
func (r *SectionReconciler) start(ctx context.Context, u *Updater, key string, a *pki.Artifact) *fetch {
	ctx, cancel := context.WithCancel(ctx)
	f := &fetch{key: key, cancel: cancel}
	r.fetch = f
	r.cfg.Log.Info("update.section_downloading", "release", key, "url", a.URL)
	go func() {
		data, err := u.Fetch(ctx, a)
		r.mu.Lock()
		f.done, f.data, f.err = true, data, err
		current := r.fetch == f
		r.mu.Unlock()
		if err != nil {
			r.cfg.Log.Warn("update.section_download_failed", "release", key, "err", err)
		}
		if current && ctx.Err() == nil && r.cfg.Wake != nil {
			r.cfg.Wake()
		}
	}()
	return f
}

// drop cancels a download under way.
func (r *SectionReconciler) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked()
}

func (r *SectionReconciler) dropLocked() {
	if r.fetch != nil {
		r.fetch.cancel()
		clear(r.fetch.data)
		r.fetch = nil
	}
}

func (r *SectionReconciler) progressing(reason string, after time.Duration, format string, args ...any) converge.Result {
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_PROGRESSING, Reason: reason,
		Message: fmt.Sprintf(format, args...), RequeueAfter: after}
}

func appliedResult(format string, args ...any) converge.Result {
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_APPLIED, Reason: converge.ReasonApplied, Message: fmt.Sprintf(format, args...)}
}

func failedResult(reason, format string, args ...any) converge.Result {
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_FAILED, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
