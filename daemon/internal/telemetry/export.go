// One export: the OTLP metrics of one sample (docs/protocol.md,
// "Telemetry") as go.opentelemetry.io/proto/otlp messages, marshalled to
// OTLP/JSON by protojson (lowerCamelCase names, 64-bit integers as
// strings, enums as numbers, as the OTLP/JSON encoding asks), and posted.
//
// The body is a MetricsData: field for field the OTLP/HTTP
// ExportMetricsServiceRequest ({"resourceMetrics": […]}), without the
// collector package and the gRPC gateway it drags in.

package telemetry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	"bcd/internal/instances"
	"bcd/internal/machine"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcev1 "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// ScopeName names the instrumentation scope of every metric.
const ScopeName = "bcd/telemetry"

// The resource attributes bcd sets itself; they win over the section's.
const (
	AttrServiceName    = "service.name"
	AttrServiceVersion = "service.version"
	AttrNodeID         = "bcd.node.id"
)

// JSON is the OTLP/JSON encoding: JSON names, enums as numbers.
var JSON = protojson.MarshalOptions{UseEnumNumbers: true}

// Encode builds and marshals sample n; it also returns how many metrics
// it holds.
func (r *Reconciler) Encode(s Settings, startedAt time.Time, n uint64) ([]byte, int, error) {
	data, err := r.Build(s, startedAt, n)
	if err != nil {
		return nil, 0, err
	}
	body, err := JSON.Marshal(data)
	if err != nil {
		return nil, 0, err
	}
	return body, len(data.GetResourceMetrics()[0].GetScopeMetrics()[0].GetMetrics()), nil
}

// Build is sample n's export: one resource, one scope, the GPU metrics and
// (with an instances.UsageSource) the instance metrics.
func (r *Reconciler) Build(s Settings, startedAt time.Time, n uint64) (*metricsv1.MetricsData, error) {
	now := uint64(r.cfg.Now().UnixNano())
	start := uint64(startedAt.UnixNano())
	var metrics []*metricsv1.Metric
	if gpus, ok := r.cfg.Machine.(machine.GPUTelemetry); ok {
		samples, err := gpus.SampleGPUs(n)
		if err != nil {
			return nil, fmt.Errorf("sampling the GPUs: %w", err)
		}
		metrics = append(metrics, gpuMetrics(samples, now)...)
	}
	if host, ok := r.cfg.Machine.(machine.HostTelemetry); ok {
		sample, err := host.SampleHost(n)
		if err != nil {
			return nil, fmt.Errorf("sampling the host: %w", err)
		}
		metrics = append(metrics, hostMetrics(sample, start, now)...)
	}
	if r.cfg.Instances != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ExportTimeout)
		usage, err := r.cfg.Instances.InstanceUsage(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("the instances' usage: %w", err)
		}
		metrics = append(metrics, instanceMetrics(usage, start, now)...)
	}
	return &metricsv1.MetricsData{ResourceMetrics: []*metricsv1.ResourceMetrics{{
		Resource: &resourcev1.Resource{Attributes: r.resource(s)},
		ScopeMetrics: []*metricsv1.ScopeMetrics{{
			Scope:   &commonv1.InstrumentationScope{Name: ScopeName, Version: r.cfg.Version},
			Metrics: metrics,
		}},
	}}}, nil
}

// resource is the section's attributes (the last of a repeated key), then
// service.name, service.version and bcd.node.id, which replace any of the
// section's of the same key.
func (r *Reconciler) resource(s Settings) []*commonv1.KeyValue {
	own := []*commonv1.KeyValue{str(AttrServiceName, "bcd"), str(AttrServiceVersion, r.cfg.Version), str(AttrNodeID, r.cfg.NodeID)}
	taken := map[string]bool{}
	for _, kv := range own {
		taken[kv.Key] = true
	}
	var out []*commonv1.KeyValue
	index := map[string]int{}
	for _, a := range s.Attributes {
		if taken[a.GetKey()] {
			continue
		}
		if i, seen := index[a.GetKey()]; seen {
			out[i] = str(a.GetKey(), a.GetValue())
			continue
		}
		index[a.GetKey()] = len(out)
		out = append(out, str(a.GetKey(), a.GetValue()))
	}
	return append(out, own...)
}

func gpuMetrics(samples []machine.GPUSample, now uint64) []*metricsv1.Metric {
	point := func(g machine.GPUSample) *metricsv1.NumberDataPoint {
		return &metricsv1.NumberDataPoint{TimeUnixNano: now, Attributes: []*commonv1.KeyValue{integer("gpu.index", int64(g.Index)), str("gpu.uuid", g.UUID)}}
	}
	util, mem, temp, power, xids := gauge("bcd.gpu.utilization", "1", "GPU busy fraction"),
		gauge("bcd.gpu.memory.used", "By", "GPU memory in use"),
		gauge("bcd.gpu.temperature", "Cel", "GPU temperature"),
		gauge("bcd.gpu.power", "W", "GPU power draw"),
		gauge("bcd.gpu.xid.active", "{xid}", "XID errors not yet cleared")
	for _, g := range samples {
		add(util, withDouble(point(g), g.Utilization))
		add(mem, withInt(point(g), int64(g.MemoryUsedBytes)))
		add(temp, withDouble(point(g), g.TemperatureC))
		add(power, withDouble(point(g), g.PowerW))
		add(xids, withInt(point(g), g.ActiveXIDs))
	}
	if len(samples) == 0 {
		return nil
	}
	return []*metricsv1.Metric{util, mem, temp, power, xids}
}

func instanceMetrics(usage []instances.Usage, start, at uint64) []*metricsv1.Metric {
	count := gauge("bcd.instances", "{instance}", "VM instances on this host")
	add(count, withInt(&metricsv1.NumberDataPoint{TimeUnixNano: at}, int64(len(usage))))
	vcpu, memory := gauge("bcd.instance.vcpu", "{vcpu}", "configured vCPUs"), gauge("bcd.instance.memory", "By", "configured memory")
	cpu := sum("bcd.instance.cpu.time", "s", "CPU time used")
	used := gauge("bcd.instance.memory.used", "By", "guest memory in use")
	read, write := sum("bcd.instance.io.read", "By", "block I/O read"), sum("bcd.instance.io.write", "By", "block I/O written")
	rx, tx := sum("bcd.instance.network.receive", "By", "network bytes received"),
		sum("bcd.instance.network.transmit", "By", "network bytes sent")
	for _, u := range usage {
		from := start
		if !u.RunningSince.IsZero() {
			from = uint64(u.RunningSince.UnixNano())
		}
		attrs := func(extra ...*commonv1.KeyValue) []*commonv1.KeyValue {
			return append([]*commonv1.KeyValue{str("instance.id", u.ID)}, extra...)
		}
		// A gauge's point is an instant; a cumulative sum's starts when its
		// counter did.
		now := func() *metricsv1.NumberDataPoint {
			return &metricsv1.NumberDataPoint{TimeUnixNano: at, Attributes: attrs()}
		}
		since := func() *metricsv1.NumberDataPoint {
			return &metricsv1.NumberDataPoint{StartTimeUnixNano: from, TimeUnixNano: at, Attributes: attrs()}
		}
		add(vcpu, withInt(now(), int64(u.VCPUs)))
		add(memory, withInt(now(), int64(u.MemoryBytes)))
		add(cpu, withDouble(since(), u.Live.CPUTime.Seconds()))
		add(used, withInt(now(), int64(u.Live.MemoryUsedBytes)))
		add(read, withInt(since(), int64(u.Live.DiskReadBytes)))
		add(write, withInt(since(), int64(u.Live.DiskWriteBytes)))
		add(rx, withInt(since(), int64(u.Live.NetRxBytes)))
		add(tx, withInt(since(), int64(u.Live.NetTxBytes)))
	}
	return []*metricsv1.Metric{count, vcpu, memory, cpu, used, read, write, rx, tx}
}

// hostMetrics are the host's own series: CPU time by state and network
// bytes by device and direction (cumulative since the schedule began),
// memory by state and its total.
func hostMetrics(s *machine.HostSample, start, at uint64) []*metricsv1.Metric {
	cpu := sum("bcd.host.cpu.time", "s", "CPU time of all cores by state")
	usage, limit := gauge("bcd.host.memory.usage", "By", "memory by state"), gauge("bcd.host.memory.limit", "By", "memory")
	net := sum("bcd.host.network.io", "By", "network bytes by device and direction")
	states := make([]string, 0, len(s.CPUSeconds))
	for state := range s.CPUSeconds {
		states = append(states, state)
	}
	sort.Strings(states)
	point := func(kvs ...*commonv1.KeyValue) *metricsv1.NumberDataPoint {
		return &metricsv1.NumberDataPoint{TimeUnixNano: at, Attributes: kvs}
	}
	counter := func(kvs ...*commonv1.KeyValue) *metricsv1.NumberDataPoint {
		return &metricsv1.NumberDataPoint{StartTimeUnixNano: start, TimeUnixNano: at, Attributes: kvs}
	}
	for _, state := range states {
		add(cpu, withDouble(counter(str("state", state)), s.CPUSeconds[state]))
	}
	used := s.MemoryTotalBytes - min(s.MemoryAvailableBytes, s.MemoryTotalBytes)
	add(usage, withInt(point(str("state", "used")), int64(used)))
	add(usage, withInt(point(str("state", "available")), int64(s.MemoryAvailableBytes)))
	add(limit, withInt(point(), int64(s.MemoryTotalBytes)))
	for _, nic := range s.NICs {
		add(net, withInt(counter(str("device", nic.Device), str("direction", "receive")), int64(nic.RxBytes)))
		add(net, withInt(counter(str("device", nic.Device), str("direction", "transmit")), int64(nic.TxBytes)))
	}
	return []*metricsv1.Metric{cpu, usage, limit, net}
}

func gauge(name, unit, description string) *metricsv1.Metric {
	return &metricsv1.Metric{Name: name, Unit: unit, Description: description, Data: &metricsv1.Metric_Gauge{Gauge: &metricsv1.Gauge{}}}
}

// sum is a cumulative, monotonic sum.
func sum(name, unit, description string) *metricsv1.Metric {
	return &metricsv1.Metric{Name: name, Unit: unit, Description: description, Data: &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{
		AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE, IsMonotonic: true}}}
}

func add(m *metricsv1.Metric, p *metricsv1.NumberDataPoint) {
	switch d := m.Data.(type) {
	case *metricsv1.Metric_Gauge:
		d.Gauge.DataPoints = append(d.Gauge.DataPoints, p)
	case *metricsv1.Metric_Sum:
		d.Sum.DataPoints = append(d.Sum.DataPoints, p)
	}
}

func withDouble(p *metricsv1.NumberDataPoint, v float64) *metricsv1.NumberDataPoint {
	p.Value = &metricsv1.NumberDataPoint_AsDouble{AsDouble: v}
	return p
}

func withInt(p *metricsv1.NumberDataPoint, v int64) *metricsv1.NumberDataPoint {
	p.Value = &metricsv1.NumberDataPoint_AsInt{AsInt: v}
	return p
}

func str(key, value string) *commonv1.KeyValue {
	return &commonv1.KeyValue{Key: key, Value: &commonv1.AnyValue{Value: &commonv1.AnyValue_StringValue{StringValue: value}}}
}

func integer(key string, value int64) *commonv1.KeyValue {
	return &commonv1.KeyValue{Key: key, Value: &commonv1.AnyValue{Value: &commonv1.AnyValue_IntValue{IntValue: value}}}
}

// post sends one export; any answer but 2xx is an error (its status and
// the start of its body, which is the receiver's and holds no secret).
func post(ctx context.Context, client *http.Client, endpoint string, headers http.Header, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, ExportTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for name, values := range headers {
		req.Header[name] = values
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d: %q", resp.StatusCode, bytes.TrimSpace(answer))
	}
	return nil
}
