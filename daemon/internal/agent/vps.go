// The agent as a VPS host (docs/daemon.md, "Instances"): with Options.VPS
// it reconciles the instances section (internal/instances) over the given
// runtimes and volume store, advertises each runtime in its Hello, routes
// the secret broker's and the workload issuer's answers to
// internal/broker, passes the section again at start (a restart or a
// reboot may have stopped domains), and serves the metadata endpoint (on
// a unix socket in fakehw, on the instance bridges on a host).

package agent

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"bcd/internal/broker"
	"bcd/internal/converge"
	"bcd/internal/images"
	"bcd/internal/instances"
	"bcd/internal/machine"
	"bcd/internal/metadata"
	"bcd/internal/runtime"
	"bcd/internal/volumes"
)

// VPS makes a node a VPS host.
type VPS struct {
	// Runtimes are the runtimes it has.
	Runtimes []runtime.Runtime
	// Volumes is its volume store (nil: none).
	Volumes *volumes.Store
	// Seeds serves the instances' seeds on the metadata endpoint (nil: none).
	Seeds metadata.Seeds
	// Images is its image store (nil: none).
	Images *images.Store
	// Accelerator is what its guests run under (runtime.AccelKVM or AccelTCG).
	Accelerator string
	// MetadataSocket serves the metadata endpoint on <data_dir>/metadata.sock
	// (fakehw, where guests are simulated).
	MetadataSocket bool
	// Metadata serves it on the instance network (a host).
	Metadata *HostMetadata
}

// HostMetadata is the metadata endpoint of a host: its listeners on the
// instance bridges, and who holds a source address.
type HostMetadata struct {
	// Listen returns the listeners (bcd helper's imds.listen).
	Listen func(ctx context.Context) ([]net.Listener, error)
	// Owners says which instance holds an address.
	Owners metadata.Owners
}

// MetadataRetry is how long a host waits before it asks for the metadata
// listeners again when it could not have them.
const MetadataRetry = 5 * time.Second

// newVPS makes the broker and the instances reconciler (nil without VPS).
func (a *Agent) newVPS() (*instances.Reconciler, error) {
	v := a.opts.VPS
	if v == nil {
		return nil, nil
	}
	a.broker = broker.New(broker.Config{NodeID: a.id.NodeID, Key: a.id.Key, BootID: a.opts.Machine.BootID,
		Send: a.session.SendControl, Log: a.log})
	cfg := instances.Config{Runtimes: v.Runtimes, Volumes: v.Volumes, Images: v.Images, Accelerator: v.Accelerator,
		Secrets: a.broker, Capacity: instances.CapacityOf(a.opts.Machine), Journal: a.journal, Log: a.log}
	if ps, ok := a.opts.Machine.(machine.PressureSource); ok {
		cfg.Pressure = ps.Pressure
	}
	r, err := instances.New(cfg)
	if err != nil {
		return nil, err
	}
	a.broker.OnSecret(func() { a.converger.Repass(converge.SectionInstances) })
	return r, nil
}

// startVPS passes the instances section again and serves the metadata
// endpoint.
func (a *Agent) startVPS(ctx context.Context) error {
	if a.instances == nil {
		return nil
	}
	a.converger.Repass(converge.SectionInstances)
	if ps, ok := a.opts.Machine.(machine.PressureSource); ok {
		go a.watchPressure(ctx, ps)
	}
	if hm := a.opts.VPS.Metadata; hm != nil {
		h := metadata.Handler(metadata.Config{Instances: a.instances, Seeds: a.opts.VPS.Seeds, Tokens: a.broker,
			Identify: metadata.ByAddress(hm.Owners), Log: a.log})
		go a.serveHostMetadata(ctx, hm, h)
	}
	if !a.opts.VPS.MetadataSocket {
		return nil
	}
	h := metadata.Handler(metadata.Config{Instances: a.instances, Seeds: a.opts.VPS.Seeds, Tokens: a.broker,
		Identify: metadata.ByHeader, Log: a.log})
	return metadata.Serve(ctx, filepath.Join(a.opts.Config.DataDir, metadata.SocketName), h)
}

// serveHostMetadata asks for the metadata listeners until it has them
// (the helper may start after bcd), then serves on them.
func (a *Agent) serveHostMetadata(ctx context.Context, hm *HostMetadata, h http.Handler) {
	for {
		listeners, err := hm.Listen(ctx)
		if err == nil && len(listeners) > 0 {
			a.log.Info("metadata.serving", "listeners", len(listeners))
			metadata.ServeListeners(ctx, listeners, h)
			return
		}
		a.log.Warn("metadata.listen_failed", "err", err, "listeners", len(listeners), "retry_ms", MetadataRetry.Milliseconds())
		select {
		case <-ctx.Done():
			return
		case <-time.After(MetadataRetry):
		}
	}
}

// PressureEvery is how often a VPS host reads its pressure while a guest
// can balloon.
const PressureEvery = 500 * time.Millisecond

// watchPressure passes the instances section again whenever the memory
// pressure changes band (instances.PressureBand), so that guests with a
// memory floor balloon or get their memory back. It reads the pressure
// only while a running guest can balloon (instances.Reconciler.Balloonable):
// a host without one, like every agent of a bcd sim fleet, reads nothing.
func (a *Agent) watchPressure(ctx context.Context, ps machine.PressureSource) {
	last := 0
	for {
		if balloonable, changed := a.instances.Balloonable(); !balloonable {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(PressureEvery):
		}
		hp, err := ps.Pressure()
		if err != nil {
			continue
		}
		if band := instances.PressureBand(hp.GetMemoryPercent()); band != last {
			a.log.Info("instances.pressure", "memory_percent", hp.GetMemoryPercent(), "band", band)
			last = band
			a.converger.Repass(converge.SectionInstances)
		}
	}
}
