// The second, independent decoder of a captured export: the harness's
// telemetry scenario writes the bytes the dev stack received (and decoded
// with the opentelemetry-proto crate) to a file and runs this test on it
// with BCD_OTLP_CAPTURE set; protojson, strict about unknown fields, must
// read it into the OTLP types and find what the scenario asserted. Without
// the variable there is nothing to decode and the test is skipped.

package telemetry

import (
	"os"
	"strconv"
	"testing"

	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestACapturedExportDecodes(t *testing.T) {
	path := os.Getenv("BCD_OTLP_CAPTURE")
	if path == "" {
		t.Skip("BCD_OTLP_CAPTURE names no captured export (the e2e telemetry scenario sets it)")
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var data metricsv1.MetricsData
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(body, &data); err != nil {
		t.Fatalf("protojson refuses the captured export: %v", err)
	}
	gpus := 0
	for _, m := range data.GetResourceMetrics()[0].GetScopeMetrics()[0].GetMetrics() {
		if m.GetName() == "bcd.gpu.utilization" {
			gpus = len(m.GetGauge().GetDataPoints())
		}
	}
	want := os.Getenv("BCD_OTLP_CAPTURE_GPUS")
	if want == "" {
		want = "8"
	}
	if got := strconv.Itoa(gpus); got != want {
		t.Fatalf("bcd.gpu.utilization has %s points, want %s", got, want)
	}
	var node string
	for _, kv := range data.GetResourceMetrics()[0].GetResource().GetAttributes() {
		if kv.GetKey() == AttrNodeID {
			node = kv.GetValue().GetStringValue()
		}
	}
	if want := os.Getenv("BCD_OTLP_CAPTURE_NODE"); want != "" && node != want {
		t.Fatalf("bcd.node.id is %q, want %q", node, want)
	}
	t.Logf("decoded %d bytes: node %s, %d GPUs", len(body), node, gpus)
}
