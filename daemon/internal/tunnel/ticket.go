// The exec ticket check (docs/protocol.md, "Tunnels"): before anything is
// opened, a ticket must verify under the tunnels issuer of the node's
// current trust bundle, for this node, for op console, unexpired on bcd's
// clock (with Leeway), and carry a jti this node never took before. Seen
// jtis are kept in the journal until they expire, so a restart does not
// reopen a replay window.

package tunnel

import (
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"time"

	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
)

// Leeway is how far past its exp bcd still takes a ticket (clock skew
// between the issuer and the node): the ticket is checked at bcd's clock
// minus Leeway.
const Leeway = 5 * time.Second

// seenKey is where the seen jtis are kept in the journal's state.
const seenKey = "tunnel_seen_jtis"

// Trust is what the check needs of the node's trust: the current bundle
// (nil without one, when no ticket can verify).
type Trust interface {
	Bundle() *agentv1.TrustBundle
}

// Checker checks exec tickets for one node.
type Checker struct {
	// NodeID is this node: a ticket's aud must be "bcd:<NodeID>".
	NodeID string
	// Trust gives the tunnels issuer and the trust domain.
	Trust Trust
	// Journal keeps the seen jtis.
	Journal *journal.Journal
	// Now is bcd's clock (default time.Now).
	Now func() time.Time
}

// Check verifies token and records its jti; it returns the ticket's
// claims, or a refusal with pki's code or ticket-replayed.
func (c *Checker) Check(token string) (*pki.ExecTicket, error) {
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	bundle := c.Trust.Bundle()
	var trusted []*ecdsa.PublicKey
	if k, err := pki.PublicKeyFromProto(bundle.GetTunnelsIssuer()); err == nil {
		if e, ok := k.ECDSA(); ok {
			trusted = append(trusted, e)
		}
	}
	issuer := pki.TunnelsIssuer(bundle.GetTrustDomain())
	ticket, err := pki.VerifyExecTicket(token, trusted, issuer, c.NodeID, now.Add(-Leeway))
	if err != nil {
		return nil, err
	}
	if ticket.Jti == "" {
		return nil, refusal.New(pki.CodeTokenClaims, "the ticket has no jti")
	}
	if err := c.take(ticket, now); err != nil {
		return nil, err
	}
	return ticket, nil
}

// take records the ticket's jti, in one journal transaction with the check
// that it was never seen, and forgets the jtis that expired.
func (c *Checker) take(ticket *pki.ExecTicket, now time.Time) error {
	return c.Journal.Update(func(tx *journal.Tx) error {
		seen := map[string]int64{}
		if data := tx.Get(seenKey); data != nil {
			if err := json.Unmarshal(data, &seen); err != nil {
				return fmt.Errorf("the journal's seen tickets: %w", err)
			}
		}
		horizon := now.Add(-Leeway).Unix()
		for jti, exp := range seen {
			if exp <= horizon {
				delete(seen, jti)
			}
		}
		if _, ok := seen[ticket.Jti]; ok {
			return refuse(CodeTicketReplayed, "ticket %s was already used on this node", ticket.Jti)
		}
		seen[ticket.Jti] = ticket.Exp
		data, err := json.Marshal(seen)
		if err != nil {
			return err
		}
		return tx.Put(seenKey, data)
	})
}
