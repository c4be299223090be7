// The destructive-command quorum of the acceptance order: with a trust
// bundle's quorum, a destructive command runs only with a batch approval
// that verifies (BATCH_UNAPPROVED otherwise), or while the destructive
// commands run outside a batch in the last hour, kept in the journal, are
// fewer than unbatched_per_hour (UNBATCHED_LIMIT otherwise).

package dispatch

import (
	"encoding/json"
	"fmt"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// unbatchedKey keeps the times of destructive commands run outside a batch.
const unbatchedKey = "unbatched_ms"

// quorum checks a destructive command: an approved batch, or room under
// unbatched_per_hour. It returns the unbatched times to record (nil for
// none) or a refusal reason.
func (d *Dispatcher) quorum(cmd *agentv1.Command, env *pki.Envelope, delivery *agentv1.CommandDelivery) ([]int64, string) {
	q, trustDomain := d.cfg.Trust.Quorum()
	if q == nil {
		return nil, "" // no trust bundle: no quorum to enforce
	}
	if approval := delivery.GetBatchApproval(); approval != nil {
		if _, err := pki.VerifyBatchApproval(pki.EnvelopeFromProto(approval), q, trustDomain, env, cmd, d.cfg.ServerNow()); err != nil {
			return nil, ReasonBatchUnapproved + ": " + string(pki.CodeOf(err))
		}
		return nil, ""
	}
	now := d.cfg.Now().UnixMilli()
	var times []int64
	_ = json.Unmarshal(d.cfg.Journal.Get(unbatchedKey), &times)
	kept := times[:0]
	for _, t := range times {
		if t > now-time.Hour.Milliseconds() {
			kept = append(kept, t)
		}
	}
	if len(kept) >= int(q.GetUnbatchedPerHour()) {
		return nil, fmt.Sprintf("%s: %d destructive command(s) outside a batch in the last hour, %d allowed", ReasonUnbatchedLimit, len(kept), q.GetUnbatchedPerHour())
	}
	return append(kept, now), ""
}
