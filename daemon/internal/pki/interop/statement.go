// The statement family: node-signed statements (node-statement).
// The Go twin of fixtures/src/interop/cases/statement.rs's verifiers.

package interop

import (
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// statementFamily is the statement family's verifier of each kind.
var statementFamily = family{
	name: "statement",
	kinds: map[string]verifier{
		"node-statement": runNodeStatement,
	},
}

func runNodeStatement(in *input) (Outcome, error) {
	key, node, body, text := in.public("key"), in.string("nodeId"), in.string("body"), in.string("envelope")
	if in.err != nil {
		return Outcome{}, in.err
	}
	statement, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.NodeStatement, error) {
		s, err := pki.VerifyStatement(env, key, node)
		if err == nil && pki.StatementBodyName(s) != body {
			return nil, &pki.Error{Code: pki.CodeStatementKind, Reason: "statement body " + pki.StatementBodyName(s)}
		}
		return s, err
	})
	return result(statement, err, func(s *agentv1.NodeStatement) map[string]any {
		return map[string]any{"nodeId": s.GetNodeId(), "bootId": s.GetBootId(), "atMs": s.GetAtMs(), "body": body}
	})
}
