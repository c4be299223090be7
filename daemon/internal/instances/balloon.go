// Ballooning under host pressure (docs/daemon.md, "Instances"): a running
// guest with a memory floor (InstanceSpec.memory_floor_bytes, below its
// memory, not huge-page backed) gives memory back down to its floor while
// the host's memory pressure is at BalloonAt % or more, and gets it back
// once the pressure is below DeflateBelow %; in between it keeps what it
// has. What a guest has now is InstanceStatus.current_memory_bytes; the
// runtime keeps the balloons (runtime.Ballooner), so a restart keeps them.

package instances

import (
	"bcd/internal/proto/agentv1"
	"bcd/internal/runtime"
)

// The pressure bands, in percent of the last 10 s stalled on memory.
const (
	BalloonAt    = 50
	DeflateBelow = 20
)

// PressureBand is 2 at or above BalloonAt, 0 below DeflateBelow, 1 in
// between: a change of band is worth a pass.
func PressureBand(memoryPercent uint32) int {
	switch {
	case memoryPercent >= BalloonAt:
		return 2
	case memoryPercent < DeflateBelow:
		return 0
	}
	return 1
}

// canBalloon says whether a guest of spec w can give memory back: a floor
// below its memory, and no huge-page backing (those pages are locked).
func canBalloon(w *agentv1.InstanceSpec) bool {
	floor := w.GetMemoryFloorBytes()
	return floor != 0 && floor < w.GetMemoryBytes() && w.GetHugepageBytes() == 0
}

// balloonable says whether a running guest of the pass can balloon.
func (p *pass) balloonable() bool {
	for id, st := range p.statuses {
		if w := p.wanted[id]; w != nil && st.GetState() == StateRunning && canBalloon(w) {
			return true
		}
	}
	return false
}

// balloon sets what each running guest has under the current pressure.
func (p *pass) balloon() error {
	band := 0
	if p.r.cfg.Pressure != nil {
		hp, err := p.r.cfg.Pressure()
		if err != nil {
			return err
		}
		band = PressureBand(hp.GetMemoryPercent())
	}
	for id, st := range p.statuses {
		w := p.wanted[id]
		if w == nil || st.GetState() != StateRunning {
			continue
		}
		full, floor := w.GetMemoryBytes(), w.GetMemoryFloorBytes()
		b, ok := p.r.runtimes[w.GetRuntime()].(runtime.Ballooner)
		if !ok {
			st.CurrentMemoryBytes = full
			continue
		}
		now, err := b.Balloon(p.ctx, id)
		if err != nil {
			return err
		}
		target := now
		switch {
		case !canBalloon(w):
			target = full
		case band == 2:
			target = floor
		case band == 0:
			target = full
		}
		if target != now {
			if err := b.SetBalloon(p.ctx, id, target); err != nil {
				return err
			}
			p.r.log.Info("instances.ballooned", "instance", id, "from_bytes", now, "to_bytes", target, "band", band)
		}
		st.CurrentMemoryBytes = target
	}
	return nil
}
