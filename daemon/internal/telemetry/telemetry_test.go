// Tests of the telemetry section: the export is OTLP/JSON that a second
// decoder (protojson into the OTLP proto types, strict) reads back, with
// the exact JSON shapes the OTLP/JSON encoding asks for; fakehw's samples
// are deterministic; the schedule is kept, restarted and stopped as the
// section says.

package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"bcd/internal/converge"
	"bcd/internal/fakehw"
	"bcd/internal/instances"
	"bcd/internal/proto/agentv1"
	"bcd/internal/runtime"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

type usage []instances.Usage

func (u usage) InstanceUsage(context.Context) ([]instances.Usage, error) { return u, nil }

func reconciler(t *testing.T, withInstances bool) *Reconciler {
	t.Helper()
	m, err := fakehw.New(t.TempDir(), "41", fakehw.VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeID: "node_7", Version: "1.2.3", Machine: m, Now: func() time.Time { return time.Unix(1_700_000_000, 5) }}
	if withInstances {
		cfg.Instances = usage{{ID: "vm-1", VCPUs: 4, MemoryBytes: 8 << 30, State: instances.StateRunning, Live: runtime.Usage{
			CPUTime: 1500 * time.Millisecond, MemoryUsedBytes: 3 << 30, DiskReadBytes: 10, DiskWriteBytes: 20, NetRxBytes: 30, NetTxBytes: 40}}}
	}
	return New(cfg)
}

func settings(endpoint string, attrs ...string) Settings {
	s := Settings{Endpoint: endpoint, Interval: MinInterval}
	for i := 0; i+1 < len(attrs); i += 2 {
		s.Attributes = append(s.Attributes, &agentv1.Attribute{Key: attrs[i], Value: attrs[i+1]})
	}
	return s
}

func TestAnExportIsOTLPJSONThatASecondDecoderReads(t *testing.T) {
	r := reconciler(t, true)
	body, count, err := r.Encode(settings("http://x/v1/metrics", "deployment.environment", "e2e", "service.name", "not-bcd"), time.Unix(1_600_000_000, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	// The second decoder: protojson, strict about unknown fields, into the
	// OTLP types.
	var data metricsv1.MetricsData
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(body, &data); err != nil {
		t.Fatalf("protojson refuses the export: %v\n%s", err, body)
	}
	rm := data.GetResourceMetrics()[0]
	var attrs []string
	for _, kv := range rm.GetResource().GetAttributes() {
		attrs = append(attrs, kv.GetKey()+"="+kv.GetValue().GetStringValue())
	}
	if got := strings.Join(attrs, ","); got != "deployment.environment=e2e,service.name=bcd,service.version=1.2.3,bcd.node.id=node_7" {
		t.Fatalf("resource attributes %s", got)
	}
	metrics := rm.GetScopeMetrics()[0].GetMetrics()
	// 5 GPU series, 4 host series, 9 instance series.
	if count != len(metrics) || count != 18 {
		t.Fatalf("%d metrics (Encode says %d)", len(metrics), count)
	}
	byName := map[string]*metricsv1.Metric{}
	for _, m := range metrics {
		byName[m.GetName()] = m
	}
	util := byName["bcd.gpu.utilization"].GetGauge().GetDataPoints()
	if len(util) != 8 {
		t.Fatalf("%d utilization points", len(util))
	}
	want := fakehw.GPUSample("41", fakehw.VariantHGXH100, 3, "", 0, 0).Utilization
	if got := util[3].GetAsDouble(); got != want || util[3].GetAttributes()[0].GetValue().GetIntValue() != 3 {
		t.Fatalf("GPU 3 utilization %v, want %v", got, want)
	}
	cpu := byName["bcd.instance.cpu.time"].GetSum()
	if !cpu.GetIsMonotonic() || cpu.GetAggregationTemporality() != metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE ||
		cpu.GetDataPoints()[0].GetAsDouble() != 1.5 || cpu.GetDataPoints()[0].GetStartTimeUnixNano() != 1_600_000_000_000_000_000 {
		t.Fatalf("cpu time %v", cpu)
	}
	if n := byName["bcd.instances"].GetGauge().GetDataPoints()[0].GetAsInt(); n != 1 {
		t.Fatalf("bcd.instances %d", n)
	}
	if tx := byName["bcd.instance.network.transmit"].GetSum().GetDataPoints(); len(tx) != 1 || tx[0].GetAsInt() != 40 {
		t.Fatalf("network transmit %v", tx)
	}
	// The host's own series: fakehw's sample 0 of an hgx-h100 (112 cores).
	host := map[string]float64{}
	for _, p := range byName["bcd.host.cpu.time"].GetSum().GetDataPoints() {
		host[p.GetAttributes()[0].GetValue().GetStringValue()] = p.GetAsDouble()
	}
	if host["user"] != 224 || host["system"] != 112 || host["idle"] != 784 {
		t.Fatalf("host cpu time %v", host)
	}
	if limit := byName["bcd.host.memory.limit"].GetGauge().GetDataPoints()[0].GetAsInt(); limit != 2<<40 {
		t.Fatalf("host memory limit %d", limit)
	}
	if net := byName["bcd.host.network.io"].GetSum().GetDataPoints(); len(net) != 2*9 {
		t.Fatalf("host network points %d (9 NICs, two directions)", len(net))
	}

	// The JSON itself: lowerCamelCase names, 64-bit integers as strings,
	// enums as numbers.
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, raw)
	scope := raw["resourceMetrics"].([]any)[0].(map[string]any)["scopeMetrics"].([]any)[0].(map[string]any)
	for _, m := range scope["metrics"].([]any) {
		m := m.(map[string]any)
		switch m["name"] {
		case "bcd.gpu.memory.used":
			p := m["gauge"].(map[string]any)["dataPoints"].([]any)[0].(map[string]any)
			if _, ok := p["asInt"].(string); !ok {
				t.Errorf("asInt is %T", p["asInt"])
			}
			if p["timeUnixNano"] != "1700000000000000005" {
				t.Errorf("timeUnixNano is %v", p["timeUnixNano"])
			}
		case "bcd.instance.io.read":
			if at := m["sum"].(map[string]any)["aggregationTemporality"]; at != float64(2) {
				t.Errorf("aggregationTemporality is %v (%T)", at, at)
			}
		}
	}
}

// checkKeys fails on any JSON object key that is not lowerCamelCase.
func checkKeys(t *testing.T, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, inner := range x {
			if strings.ContainsAny(k, "_-") || k[0] < 'a' || k[0] > 'z' {
				t.Errorf("key %q is not lowerCamelCase", k)
			}
			checkKeys(t, inner)
		}
	case []any:
		for _, inner := range x {
			checkKeys(t, inner)
		}
	}
}

func TestFakeGPUSamplesAreAFunctionOfSeedIndexAndCounter(t *testing.T) {
	a := fakehw.GPUSample("41", fakehw.VariantHGXH100, 2, "u", 80<<30, 5)
	if b := fakehw.GPUSample("41", fakehw.VariantHGXH100, 2, "u", 80<<30, 5); a != b {
		t.Fatalf("%+v != %+v", a, b)
	}
	if c := fakehw.GPUSample("41", fakehw.VariantHGXH100, 2, "u", 80<<30, 6); a == c {
		t.Fatal("the counter changes nothing")
	}
	if d := fakehw.GPUSample("42", fakehw.VariantHGXH100, 2, "u", 80<<30, 5); a == d {
		t.Fatal("the seed changes nothing")
	}
	for n := uint64(0); n < 50; n++ {
		s := fakehw.GPUSample("41", fakehw.VariantL40S, uint32(n%4), "u", 48<<30, n)
		if s.Utilization < 0 || s.Utilization > 1 || s.MemoryUsedBytes > 48<<30 || s.TemperatureC < 30 || s.TemperatureC >= 80 ||
			s.PowerW < 60 || s.PowerW >= 700 || s.ActiveXIDs > 1 {
			t.Fatalf("sample %d out of range: %+v", n, s)
		}
	}
}

func TestSectionsParse(t *testing.T) {
	s, err := ParseSection(&agentv1.TelemetrySection{OtlpEndpoint: "http://c:4318"})
	if err != nil || s.Endpoint != "http://c:4318/v1/metrics" || s.Interval != DefaultInterval {
		t.Fatalf("%+v, %v", s, err)
	}
	s, _ = ParseSection(&agentv1.TelemetrySection{OtlpEndpoint: "https://c/custom", ExportIntervalMs: 1000})
	if s.Endpoint != "https://c/custom" || s.Interval != MinInterval || !s.Clamped {
		t.Fatalf("%+v", s)
	}
	if s, err := ParseSection(nil); err != nil || s.Endpoint != "" {
		t.Fatalf("no section: %+v, %v", s, err)
	}
	if _, err := ParseSection(&agentv1.TelemetrySection{OtlpEndpoint: "ftp://c"}); err == nil {
		t.Fatal("an ftp endpoint parsed")
	}
}

// receiver is an OTLP endpoint that hands each body to the test.
func receiver(t *testing.T) (string, chan []byte) {
	bodies := make(chan []byte, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" || r.URL.Path != "/v1/metrics" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		bodies <- body
		w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, bodies
}

func await(t *testing.T, bodies chan []byte) *metricsv1.MetricsData {
	t.Helper()
	select {
	case body := <-bodies:
		var data metricsv1.MetricsData
		if err := protojson.Unmarshal(body, &data); err != nil {
			t.Fatal(err)
		}
		return &data
	case <-time.After(10 * time.Second):
		t.Fatal("no export")
		return nil
	}
}

func input(endpoint string, intervalMs uint32, attrs ...*agentv1.Attribute) converge.Input {
	return converge.Input{Spec: &agentv1.NodeSpec{Generation: 2, Telemetry: &agentv1.TelemetrySection{
		OtlpEndpoint: endpoint, ExportIntervalMs: intervalMs, ResourceAttributes: attrs}}}
}

func TestTheScheduleIsKeptRestartedAndStopped(t *testing.T) {
	url, bodies := receiver(t)
	r := reconciler(t, false)
	defer r.Stop()
	ctx := context.Background()
	res, err := r.Reconcile(ctx, input(url, 5000))
	if err != nil || res.State != agentv1.SectionState_SECTION_STATE_APPLIED || !strings.Contains(res.Message, "every 5s") {
		t.Fatalf("%+v, %v", res, err)
	}
	first := await(t, bodies) // at once, not after the interval
	running := r.running

	// The same section keeps the schedule.
	if _, err := r.Reconcile(ctx, input(url, 5000)); err != nil || r.running != running {
		t.Fatalf("an unchanged section restarted the schedule (%v)", err)
	}
	// A changed one restarts it: an export at once, from sample 0 again.
	if _, err := r.Reconcile(ctx, input(url, 6000, &agentv1.Attribute{Key: "k", Value: "v"})); err != nil || r.running == running {
		t.Fatalf("a changed section kept the schedule (%v)", err)
	}
	again := await(t, bodies)
	pointsOf := func(d *metricsv1.MetricsData) []*metricsv1.NumberDataPoint {
		return d.GetResourceMetrics()[0].GetScopeMetrics()[0].GetMetrics()[0].GetGauge().GetDataPoints()
	}
	if pointsOf(first)[0].GetAsDouble() != pointsOf(again)[0].GetAsDouble() {
		t.Fatal("the restarted schedule did not start again at sample 0")
	}
	if kv := again.GetResourceMetrics()[0].GetResource().GetAttributes()[0]; kv.GetKey() != "k" {
		t.Fatalf("the new attributes are not exported: %v", kv)
	}
	// An empty endpoint stops it.
	res, _ = r.Reconcile(ctx, input("", 0))
	if r.running != nil || res.State != agentv1.SectionState_SECTION_STATE_APPLIED {
		t.Fatalf("an empty endpoint left the schedule running (%+v)", res)
	}
	// An invalid endpoint is a FAILED section.
	if res, _ := r.Reconcile(ctx, input("not a url", 0)); res.State != agentv1.SectionState_SECTION_STATE_FAILED || res.Reason != ReasonInvalidEndpoint {
		t.Fatalf("%+v", res)
	}
}
