// Tests of authenticated exports: the headers' form and its refusals
// (never quoting a value), a section with headers_ref waiting for the
// secret broker, then exporting with the headers, keeping them when the
// schedule restarts, asking again after a restart of bcd, FAILED for a
// refused or malformed secret, and the secret in no log line.

package telemetry

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"bcd/internal/broker"
	"bcd/internal/converge"
	"bcd/internal/fakehw"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"bcd/internal/testlog"
)

const secretValue = "s3cret-token"

func TestHeadersParse(t *testing.T) {
	h, err := ParseHeaders([]byte(" Authorization = Bearer%20" + secretValue + " ,x-scope-orgid=tenant%2C1"))
	if err != nil || h.Get("Authorization") != "Bearer "+secretValue || h.Get("X-Scope-Orgid") != "tenant,1" || len(h) != 2 {
		t.Fatalf("%v, %v", h, err)
	}
	for name, text := range map[string]string{
		"empty":           "",
		"no equals":       "Authorization",
		"no name":         "=" + secretValue,
		"not a token":     "Auth orization=" + secretValue,
		"reserved":        "Content-Type=" + secretValue,
		"host":            "host=" + secretValue,
		"repeated":        "a=1,A=" + secretValue,
		"bad escape":      "a=%zz" + secretValue,
		"a line break":    "a=x%0d%0aInjected:%20" + secretValue,
		"too many":        strings.Repeat("a=1,", MaxHeaders) + "b=2",
		"too many bytes":  "a=" + strings.Repeat("x", MaxHeadersBytes),
		"a trailing list": "a=1,",
	} {
		_, err := ParseHeaders([]byte(text))
		if err == nil {
			t.Errorf("%s: parsed", name)
			continue
		}
		if strings.Contains(err.Error(), secretValue) || strings.Contains(err.Error(), "xxxx") {
			t.Errorf("%s: the error quotes the secret: %v", name, err)
		}
	}
}

// secrets is the broker as the section sees it: pending until answered.
type secrets struct {
	mu       sync.Mutex
	values   map[string]string
	answered bool
	asked    int
	forgot   []string
}

func (s *secrets) Secret(ref string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	if !s.answered {
		return nil, broker.ErrPending
	}
	v, ok := s.values[ref]
	if !ok {
		return nil, &refusal.Error{Code: "secret-unknown", Reason: "no secret " + ref + " for this node"}
	}
	return []byte(v), nil
}

func (s *secrets) Forget(ref string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgot = append(s.forgot, ref)
}

func (s *secrets) answer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answered = true
}

// headerReceiver is an OTLP endpoint that hands each export's Authorization to the test.
func headerReceiver(t *testing.T) (string, chan string, *http.Client) {
	seen := make(chan string, 16)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization") + "|" + r.Header.Get("Content-Type")
		w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, seen, srv.Client()
}

func awaitHeader(t *testing.T, seen chan string) string {
	t.Helper()
	select {
	case h := <-seen:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no export")
		return ""
	}
}

func headersInput(endpoint string, intervalMs uint32, ref string) converge.Input {
	return converge.Input{Spec: &agentv1.NodeSpec{Generation: 2, Telemetry: &agentv1.TelemetrySection{
		OtlpEndpoint: endpoint, ExportIntervalMs: intervalMs, HeadersRef: ref}}}
}

func headersReconciler(t *testing.T, s *secrets, logs *testlog.Buffer, client *http.Client) *Reconciler {
	m, err := fakehw.New(t.TempDir(), "41", fakehw.VariantCPU)
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{NodeID: "node_7", Version: "1.2.3", Machine: m, Secrets: s, Client: client, Log: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(r.Stop)
	return r
}

func TestAnExportCarriesTheHeadersOfItsSecret(t *testing.T) {
	url, seen, client := headerReceiver(t)
	s := &secrets{values: map[string]string{"sec_1": "Authorization=Bearer%20" + secretValue + ",X-Tenant=acme"}}
	logs := &testlog.Buffer{}
	r := headersReconciler(t, s, logs, client)
	ctx := context.Background()

	res, _ := r.Reconcile(ctx, headersInput(url, 5000, "sec_1"))
	if res.State != agentv1.SectionState_SECTION_STATE_PROGRESSING || res.Reason != ReasonAwaitingHeaders || res.RequeueAfter != HeadersRetry {
		t.Fatalf("%+v", res)
	}
	if r.running != nil {
		t.Fatal("exporting without the headers")
	}
	s.answer()
	res, _ = r.Reconcile(ctx, headersInput(url, 5000, "sec_1"))
	if res.State != agentv1.SectionState_SECTION_STATE_APPLIED || !strings.Contains(res.Message, "with the 2 header(s) of sec_1") {
		t.Fatalf("%+v", res)
	}
	if got := awaitHeader(t, seen); got != "Bearer "+secretValue+"|application/json" {
		t.Fatalf("export headers %q", got)
	}
	if len(s.forgot) != 1 {
		t.Fatalf("the broker kept the plaintext: %v", s.forgot)
	}
	// A changed section naming the same secret restarts the schedule with
	// the headers kept: the broker is not asked again.
	asked := s.asked
	running := r.running
	if res, _ := r.Reconcile(ctx, headersInput(url, 6000, "sec_1")); res.State != agentv1.SectionState_SECTION_STATE_APPLIED || r.running == running {
		t.Fatalf("%+v", res)
	}
	if got := awaitHeader(t, seen); got != "Bearer "+secretValue+"|application/json" || s.asked != asked {
		t.Fatalf("after the restart %q, asked %d times more", got, s.asked-asked)
	}

	// bcd restarts: Resume exports nothing without the headers and asks
	// for a pass, which asks the broker again.
	again := headersReconciler(t, s, logs, client)
	spec := headersInput(url, 6000, "sec_1").Spec
	again.Resume(ctx, spec)
	if again.running != nil || !again.Waiting() {
		t.Fatalf("resumed without the headers (running %v, waiting %v)", again.running != nil, again.Waiting())
	}
	if res, _ := again.Reconcile(ctx, converge.Input{Spec: spec, Previous: spec}); res.State != agentv1.SectionState_SECTION_STATE_APPLIED || again.Waiting() {
		t.Fatalf("%+v", res)
	}
	if got := awaitHeader(t, seen); got != "Bearer "+secretValue+"|application/json" {
		t.Fatalf("after a restart of bcd %q", got)
	}
	if strings.Contains(logs.String(), secretValue) {
		t.Fatalf("the secret is in the log:\n%s", logs)
	}
}

func TestARefusedOrMalformedSecretFailsTheSection(t *testing.T) {
	s := &secrets{answered: true, values: map[string]string{"sec_bad": "Authorization " + secretValue}}
	logs := &testlog.Buffer{}
	r := headersReconciler(t, s, logs, nil)
	ctx := context.Background()
	// Headers over plain HTTP: refused before the broker is asked.
	res, _ := r.Reconcile(ctx, headersInput("http://127.0.0.1:1", 5000, "sec_bad"))
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonInvalidEndpoint || s.asked != 0 {
		t.Fatalf("%+v (asked %d)", res, s.asked)
	}
	res, _ = r.Reconcile(ctx, headersInput("https://127.0.0.1:1", 5000, "sec_unknown"))
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonHeadersRefused || !strings.Contains(res.Message, "secret-unknown: ") {
		t.Fatalf("%+v", res)
	}
	res, _ = r.Reconcile(ctx, headersInput("https://127.0.0.1:1", 5000, "sec_bad"))
	if res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonInvalidHeaders || strings.Contains(res.Message, secretValue) {
		t.Fatalf("%+v", res)
	}
	if r.running != nil || strings.Contains(logs.String(), secretValue) {
		t.Fatalf("running %v; log:\n%s", r.running != nil, logs)
	}
	// Without a broker, a section with headers is refused.
	m, _ := fakehw.New(t.TempDir(), "41", fakehw.VariantCPU)
	bare := New(Config{NodeID: "node_7", Machine: m})
	if res, _ := bare.Reconcile(ctx, headersInput("https://127.0.0.1:1", 5000, "sec_1")); res.Reason != ReasonHeadersRefused {
		t.Fatalf("%+v", res)
	}
}
