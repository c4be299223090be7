// Package telemetry is the reconciler of the NodeSpec telemetry section
// (docs/protocol.md, "Telemetry"): it exports the node's metrics as
// OTLP/JSON over HTTP to the section's endpoint, once when the section
// applies, then every export_interval_ms (60 s when 0, never under 5 s).
// A section that did not change keeps its schedule; a changed one restarts
// it (the sample counter starts again at 0); an empty endpoint, or no
// section, stops it. The schedule lives in the process: at start the
// converger resumes it from the applied spec (converge.Resumer).
//
// A section with headers_ref exports with the headers of that secret
// (headers.go), asked of the secret broker (Config.Secrets) and kept in
// memory, never on disk or in a log: the schedule starts once they came
// (PROGRESSING AwaitingHeaders until then), keeps them when it restarts
// for a changed section naming the same secret, and after a restart of bcd
// asks again (converge.Waiter: the section is passed again at start,
// since the headers cannot be had before the session is up).
//
// What is exported is export.go's; the numbers come from the machine's
// GPUs (machine.GPUTelemetry) and, on a VPS host, the instances' usage
// (instances.UsageSource, whose live counters their runtimes read). The OpenTelemetry Go SDK's OTLP/HTTP exporter is not used:
// it speaks binary protobuf only, and its periodic reader keeps its own
// clock and aggregation, where this section wants an export at the instant
// it applies and samples the exporter numbers itself. The export is the
// OTLP proto types (go.opentelemetry.io/proto/otlp) marshalled with
// protojson under the OTLP/JSON rules.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"bcd/internal/broker"
	"bcd/internal/converge"
	"bcd/internal/instances"
	"bcd/internal/machine"
	"bcd/internal/proto/agentv1"
)

// The interval's bounds.
const (
	DefaultInterval = 60 * time.Second
	MinInterval     = 5 * time.Second
)

// ExportTimeout bounds one export.
const ExportTimeout = 10 * time.Second

// Reasons of the section's status.
const (
	// ReasonInvalidEndpoint is an endpoint that is not an http(s) URL.
	ReasonInvalidEndpoint = "InvalidEndpoint"
	// ReasonAwaitingHeaders is a headers_ref whose secret has not come
	// from the secret broker yet (PROGRESSING).
	ReasonAwaitingHeaders = "AwaitingHeaders"
	// ReasonHeadersRefused is a headers_ref the secret broker refused
	// (secret-unknown, say), or a bcd without a broker (FAILED).
	ReasonHeadersRefused = "HeadersRefused"
	// ReasonInvalidHeaders is a secret that is not headers (FAILED).
	ReasonInvalidHeaders = "InvalidHeaders"
)

// HeadersRetry is when a section waiting for its headers is passed again
// (the broker asks again once its answer is late).
const HeadersRetry = 10 * time.Second

// Secrets is the secret broker, as the section uses it (*broker.Broker).
type Secrets interface {
	// Secret is the plaintext of ref, broker.ErrPending until it came.
	Secret(ref string) ([]byte, error)
	// Forget drops what the broker keeps of ref.
	Forget(ref string)
}

// Config wires the reconciler.
type Config struct {
	// NodeID and Version go into every export's resource.
	NodeID, Version string
	// Machine is sampled for GPU metrics when it is a machine.GPUTelemetry.
	Machine machine.Machine
	// Instances gives the VM instances' usage on a VPS host (nil: none,
	// and then no instance metric, not even bcd.instances, is exported).
	Instances instances.UsageSource
	// Client sends the exports (default: one with ExportTimeout).
	Client *http.Client
	// Secrets fetches a headers_ref (nil: a section with one is FAILED).
	Secrets Secrets
	// Now is the clock of the timestamps (tests).
	Now func() time.Time
	// Log receives telemetry.* lines.
	Log *slog.Logger
}

// Reconciler reconciles the telemetry section.
type Reconciler struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	running *schedule
	// headers are the headers of headersRef, kept while a section names it.
	headersRef string
	headers    http.Header
	// resumed says Resume left a section waiting for its headers.
	resumed bool
}

var (
	_ converge.Reconciler = (*Reconciler)(nil)
	_ converge.Resumer    = (*Reconciler)(nil)
	_ converge.Waiter     = (*Reconciler)(nil)
)

// New returns the reconciler; nothing is exported before a section applies.
func New(cfg Config) *Reconciler {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: ExportTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{cfg: cfg, log: log}
}

// Section is "telemetry".
func (r *Reconciler) Section() string { return converge.SectionTelemetry }

// Settings are what a section asks for, as bcd runs it.
type Settings struct {
	// Endpoint is the URL exports are posted to ("" for none).
	Endpoint string
	// Interval is the time between exports.
	Interval time.Duration
	// Attributes are the section's resource attributes, in order.
	Attributes []*agentv1.Attribute
	// Clamped says the section asked for less than MinInterval.
	Clamped bool
	// HeadersRef is the secret whose headers every export carries ("": none).
	HeadersRef string
	// headers are HeadersRef's, once fetched.
	headers http.Header
}

func (s Settings) equal(o Settings) bool {
	return s.Endpoint == o.Endpoint && s.Interval == o.Interval && s.HeadersRef == o.HeadersRef &&
		slices.EqualFunc(s.Attributes, o.Attributes, func(a, b *agentv1.Attribute) bool {
			return a.GetKey() == b.GetKey() && a.GetValue() == b.GetValue()
		})
}

// ParseSection reads a section: the endpoint (a path of "" or "/" becomes
// OTLP/HTTP's /v1/metrics; one with headers must be https://: they are
// secrets), the interval (0: DefaultInterval; below MinInterval:
// MinInterval) and the attributes.
func ParseSection(t *agentv1.TelemetrySection) (Settings, error) {
	s := Settings{Attributes: t.GetResourceAttributes()}
	if t.GetOtlpEndpoint() == "" {
		return s, nil
	}
	s.HeadersRef = t.GetHeadersRef()
	u, err := url.Parse(t.GetOtlpEndpoint())
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("otlp_endpoint %q is not an http:// or https:// URL", t.GetOtlpEndpoint())
	}
	if s.HeadersRef != "" && u.Scheme != "https" {
		return s, fmt.Errorf("otlp_endpoint %q is not https://: the headers of %s would cross the network in the clear", t.GetOtlpEndpoint(), s.HeadersRef)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/metrics"
	}
	s.Endpoint = u.String()
	s.Interval = time.Duration(t.GetExportIntervalMs()) * time.Millisecond
	switch {
	case s.Interval == 0:
		s.Interval = DefaultInterval
	case s.Interval < MinInterval:
		s.Interval, s.Clamped = MinInterval, true
	}
	return s, nil
}

// Reconcile starts, keeps, restarts or stops the schedule for the spec's
// section, once the headers of its headers_ref are here.
func (r *Reconciler) Reconcile(ctx context.Context, in converge.Input) (converge.Result, error) {
	want, err := ParseSection(in.Spec.GetTelemetry())
	r.mu.Lock()
	r.resumed = false
	r.mu.Unlock()
	if err != nil {
		r.stop("invalid section")
		return failedResult(ReasonInvalidEndpoint, err.Error()), nil
	}
	if want.HeadersRef != "" {
		headers, res, ok := r.fetchHeaders(want.HeadersRef)
		if !ok {
			r.stop("the section's headers are not here")
			return res, nil
		}
		want.headers = headers
	}
	r.apply(ctx, want)
	return applied(want), nil
}

// fetchHeaders is the headers of ref: kept, or asked of the broker; when
// they are not here, the section's status says why.
func (r *Reconciler) fetchHeaders(ref string) (http.Header, converge.Result, bool) {
	r.mu.Lock()
	if r.headersRef == ref {
		defer r.mu.Unlock()
		return r.headers, converge.Result{}, true
	}
	r.headersRef, r.headers = "", nil
	r.mu.Unlock()
	if r.cfg.Secrets == nil {
		return nil, failedResult(ReasonHeadersRefused, "this bcd has no secret broker to fetch "+ref), false
	}
	plaintext, err := r.cfg.Secrets.Secret(ref)
	switch {
	case errors.Is(err, broker.ErrPending):
		return nil, converge.Result{State: agentv1.SectionState_SECTION_STATE_PROGRESSING, Reason: ReasonAwaitingHeaders,
			Message: "waiting for the headers of " + ref + " from the secret broker", RequeueAfter: HeadersRetry}, false
	case err != nil:
		r.log.Warn("telemetry.headers_refused", "headers_ref", ref, "err", err)
		return nil, failedResult(ReasonHeadersRefused, fmt.Sprintf("the secret broker refused %s: %v", ref, err)), false
	}
	headers, err := ParseHeaders(plaintext)
	r.cfg.Secrets.Forget(ref)
	if err != nil {
		r.log.Warn("telemetry.headers_invalid", "headers_ref", ref, "err", err)
		return nil, failedResult(ReasonInvalidHeaders, fmt.Sprintf("%s: %v", ref, err)), false
	}
	r.mu.Lock()
	r.headersRef, r.headers = ref, headers
	r.mu.Unlock()
	r.log.Info("telemetry.headers_received", "headers_ref", ref, "headers", len(headers))
	return headers, converge.Result{}, true
}

// Resume takes up the schedule of the applied spec at start; one with a
// headers_ref waits for the pass Start gives a Waiter, which asks the
// broker once the session can carry the request.
func (r *Reconciler) Resume(ctx context.Context, spec *agentv1.NodeSpec) {
	want, err := ParseSection(spec.GetTelemetry())
	if err != nil {
		return
	}
	if want.HeadersRef != "" {
		r.mu.Lock()
		r.resumed = true
		r.mu.Unlock()
		return
	}
	r.apply(ctx, want)
}

// Waiting says Resume left the section waiting for its headers.
func (r *Reconciler) Waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resumed
}

// apply makes the running schedule the one of want.
func (r *Reconciler) apply(ctx context.Context, want Settings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running != nil && r.running.settings.equal(want) {
		return
	}
	r.stopLocked("the section changed")
	if want.Endpoint == "" {
		return
	}
	r.running = r.start(ctx, want)
	r.log.Info("telemetry.started", "endpoint", want.Endpoint, "interval_ms", want.Interval.Milliseconds(), "attributes", len(want.Attributes),
		"headers_ref", want.HeadersRef, "headers", len(want.headers))
}

func applied(s Settings) converge.Result {
	message := "no endpoint: nothing is exported"
	if s.Endpoint != "" {
		message = fmt.Sprintf("exporting OTLP/JSON to %s every %s", s.Endpoint, s.Interval)
		if s.HeadersRef != "" {
			message += fmt.Sprintf(" with the %d header(s) of %s", len(s.headers), s.HeadersRef)
		}
		if s.Clamped {
			message += fmt.Sprintf(" (the section asked for less than the minimum %s)", MinInterval)
		}
	}
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_APPLIED, Reason: converge.ReasonApplied, Message: message}
}

func failedResult(reason, message string) converge.Result {
	return converge.Result{State: agentv1.SectionState_SECTION_STATE_FAILED, Reason: reason, Message: message}
}

// Stop stops the schedule and waits for an export under way.
func (r *Reconciler) Stop() { r.stop("bcd is stopping") }

func (r *Reconciler) stop(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked(why)
}

func (r *Reconciler) stopLocked(why string) {
	if r.running == nil {
		return
	}
	r.running.cancel()
	<-r.running.done
	r.log.Info("telemetry.stopped", "endpoint", r.running.settings.Endpoint, "reason", why, "exports", r.running.exports)
	r.running = nil
}

// schedule is one running export loop.
type schedule struct {
	settings Settings
	cancel   context.CancelFunc
	done     chan struct{}
	exports  int
}

// start runs an export now, then every interval, until ctx ends or the
// schedule is stopped.
func (r *Reconciler) start(ctx context.Context, s Settings) *schedule {
	ctx, cancel := context.WithCancel(ctx)
	sch := &schedule{settings: s, cancel: cancel, done: make(chan struct{})}
	startedAt := r.cfg.Now()
	go func() {
		defer close(sch.done)
		ticker := time.NewTicker(s.Interval)
		defer ticker.Stop()
		for n := uint64(0); ; n++ {
			r.exportOnce(ctx, s, startedAt, n)
			sch.exports++
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return sch
}

// exportOnce samples and posts sample n; a failure is logged, and the
// schedule goes on.
func (r *Reconciler) exportOnce(ctx context.Context, s Settings, startedAt time.Time, n uint64) {
	body, metrics, err := r.Encode(s, startedAt, n)
	if err != nil {
		r.log.Error("telemetry.encode_failed", "err", err)
		return
	}
	if err := post(ctx, r.cfg.Client, s.Endpoint, s.headers, body); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("telemetry.export_failed", "endpoint", s.Endpoint, "sample", n, "err", err)
		}
		return
	}
	r.log.Debug("telemetry.exported", "endpoint", s.Endpoint, "sample", n, "metrics", metrics, "bytes", len(body))
}
