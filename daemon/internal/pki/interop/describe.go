// The expect objects of verified objects, member for member as the Rust
// side's family verifiers (fixtures/src/interop/cases/) build them.

package interop

import (
	"encoding/base64"
	"unicode/utf8"

	"bcd/internal/proto/agentv1"
)

func std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// nonNil makes an absent list an empty one, as serde writes it.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func keyids(keys []*agentv1.PublicKey) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.GetKeyid())
	}
	return out
}

// DescribeJoinResponse is the expect object of a verified JoinResponse.
func DescribeJoinResponse(r *agentv1.JoinResponse) map[string]any {
	chain := make([]string, 0, len(r.GetCertificateChain()))
	for _, c := range r.GetCertificateChain() {
		chain = append(chain, std(c))
	}
	return map[string]any{
		"nodeId":           r.GetNodeId(),
		"trustDomain":      r.GetTrustDomain(),
		"poolId":           r.GetPoolId(),
		"csrPin":           r.GetCsrPin(),
		"issuedAtMs":       r.GetIssuedAtMs(),
		"certificateChain": chain,
		"commandRoots":     keyids(r.GetTrust().GetCommandRoots()),
		"hasTrustBundle":   r.GetTrust().GetTrustBundle() != nil,
		"gateway": map[string]any{
			"url":              r.GetGateway().GetUrl(),
			"serverName":       r.GetGateway().GetServerName(),
			"servingCaSpkiPin": r.GetGateway().GetServingCaSpkiPin(),
		},
	}
}

// DescribeCommand is the expect.command object of a command.
func DescribeCommand(c *agentv1.Command) map[string]any {
	return map[string]any{
		"id":            c.GetId(),
		"nodeId":        c.GetNodeId(),
		"kind":          c.GetKind(),
		"params":        lossyUTF8(c.GetParams()),
		"notAfterMs":    c.GetNotAfterMs(),
		"minGeneration": c.GetMinGeneration(),
		"retrySafe":     c.GetRetrySafe(),
		"destructive":   c.GetDestructive(),
		"batch":         c.GetBatch(),
		"issuedAtMs":    c.GetIssuedAtMs(),
	}
}

// DescribeTrustBundle is the expect object of an accepted trust bundle.
func DescribeTrustBundle(b *agentv1.TrustBundle) map[string]any {
	return map[string]any{
		"trustDomain":  b.GetTrustDomain(),
		"sequence":     b.GetSequence(),
		"commandRoots": keyids(b.GetCommandRoots()),
		"approvers":    keyids(b.GetQuorum().GetApprovers()),
		"threshold":    b.GetQuorum().GetThreshold(),
	}
}

// lossyUTF8 decodes b as Rust's String::from_utf8_lossy does: each maximal
// ill-formed subsequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var out []byte
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			out = append(out, b[:size]...)
			b = b[size:]
			continue
		}
		out = append(out, "\uFFFD"...)
		b = b[maximalSubpart(b):]
	}
	return string(out)
}

// maximalSubpart returns the length of the longest prefix of b (at least 1)
// that starts a well-formed UTF-8 sequence, b being ill-formed at its start.
func maximalSubpart(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for i := 1; i <= need && i < len(b); i++ {
		if b[i] < lo || b[i] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}
