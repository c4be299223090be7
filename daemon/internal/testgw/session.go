// The Gateway service's streams: the caller's client certificate checked
// against the node CA (cert-unknown, cert-validity, cert-revoked), a
// Session stream handed to the test once its first frame is the node's
// Hello (hello-expected, node-mismatch; frame-too-large above
// MaxMessageBytes), and every Tunnel refused tunnel-unknown.

package testgw

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"bcd/internal/identity"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
)

// Session is one node's Session stream, scripted by the test.
type Session struct {
	// NodeID is the client certificate's CN.
	NodeID string
	// NodeKey is the certified key (verifies node statements).
	NodeKey *pki.PublicKey
	// Resumed says the stream's TLS connection resumed a session.
	Resumed bool
	// Frames receives what the node sends; it is closed when the stream ends.
	Frames chan *agentv1.NodeFrame
	stream agentv1.Gateway_SessionServer
	end    chan error
	once   sync.Once
}

// Send sends a frame to the node.
func (s *Session) Send(f *agentv1.GatewayFrame) error { return s.stream.Send(f) }

// SetTrailer sets the trailer the stream ends with (a retry-after-ms
// hint, say).
func (s *Session) SetTrailer(md metadata.MD) { s.stream.SetTrailer(md) }

// End ends the stream with err (nil: a clean end).
func (s *Session) End(err error) { s.once.Do(func() { s.end <- err }) }

// authenticate returns the node id (CN) and key of the caller's client
// certificate, refusing none, one the node CA did not issue (cert-unknown),
// one outside its validity (cert-validity) and a revoked node.
func (g *Gateway) authenticate(ctx context.Context) (string, *pki.PublicKey, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "no client certificate")
	}
	leaf := info.State.PeerCertificates[0]
	if _, err := pki.VerifyIssued(leaf.Raw, g.Keys.NodeCACert, pki.VerifyOptions{At: time.Now(), Usage: pki.UsageClient}); err != nil {
		if pki.CodeOf(err) == pki.CodeCertValidity {
			return "", nil, refusal.Status(pki.CodeCertValidity, "%v", err)
		}
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "not issued by the node CA: %v", err)
	}
	nodeID := leaf.Subject.CommonName
	g.mu.Lock()
	revoked := g.revoked[nodeID]
	g.mu.Unlock()
	if revoked {
		return "", nil, refusal.Status(refusal.CodeCertRevoked, "node %s was revoked", nodeID)
	}
	key, err := pki.NewPublicKey(leaf.PublicKey)
	if err != nil {
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "its key: %v", err)
	}
	return nodeID, key, nil
}

// Session authenticates the client certificate and hands the stream over.
// The first frame must be a Hello naming the certificate's node
// (hello-expected, node-mismatch), and no frame may be above
// MaxMessageBytes (frame-too-large): either refusal ends the stream, also
// before the test took the session.
func (g *Gateway) Session(stream agentv1.Gateway_SessionServer) error {
	nodeID, key, err := g.authenticate(stream.Context())
	if err != nil {
		return err
	}
	s := &Session{NodeID: nodeID, NodeKey: key, Resumed: identity.DidResume(stream.Context()), Frames: make(chan *agentv1.NodeFrame, 256),
		stream: stream, end: make(chan error, 1)}
	go func() {
		defer close(s.Frames)
		for first := true; ; first = false {
			f, err := recvFrame(stream)
			if err == nil && first {
				err = checkHello(f, nodeID)
			}
			if err != nil {
				if errors.Is(err, io.EOF) && first {
					err = refusal.Status(refusal.CodeHelloExpected, "the stream ended before a Hello")
				}
				if errors.Is(err, io.EOF) {
					s.End(nil)
				} else {
					s.End(err)
				}
				return
			}
			s.Frames <- f
		}
	}()
	select {
	case g.Sessions <- s:
	case err := <-s.end:
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	select {
	case err := <-s.end:
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

// checkHello refuses a first frame that is not the certificate's node's Hello.
func checkHello(f *agentv1.NodeFrame, nodeID string) error {
	switch {
	case f.GetHello() == nil:
		return refusal.Status(refusal.CodeHelloExpected, "the first frame is not a Hello")
	case f.GetHello().GetNodeId() != nodeID:
		return refusal.Status(refusal.CodeNodeMismatch, "Hello names %q, the certificate %s", f.GetHello().GetNodeId(), nodeID)
	case !helloShaped(f.GetHello()):
		return refusal.Status(refusal.CodeHelloMalformed, "the Hello's journal id, boot id or daemon version is not of its form")
	}
	return nil
}

// recvFrame receives one frame, refusing one above MaxMessageBytes.
func recvFrame(stream agentv1.Gateway_SessionServer) (*agentv1.NodeFrame, error) {
	f, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if size := proto.Size(f); size > MaxMessageBytes {
		return nil, refusal.Status(refusal.CodeFrameTooLarge, "a message above %d bytes: %d bytes", MaxMessageBytes, size)
	}
	return f, nil
}

// Tunnel authenticates the caller and refuses its tunnel: the test gateway
// never sends an OpenTunnel, so every tunnel id is unknown (tunnel-unknown),
// as the dev stack answers a tunnel it did not ask for.
func (g *Gateway) Tunnel(stream agentv1.Gateway_TunnelServer) error {
	if _, _, err := g.authenticate(stream.Context()); err != nil {
		return err
	}
	return refusal.Status(refusal.CodeTunnelUnknown, "this gateway asked for no tunnel")
}

// maxHelloField is the longest journal id, boot id or daemon version
// (docs/protocol.md, "Hello and Welcome").
const maxHelloField = 64

// helloShaped reports whether a Hello's strings are of their form: the
// journal id and the boot id identifiers (ASCII letters, digits, "._:-";
// the journal id not empty), the daemon version letters, digits and
// ".+_~-", each at most maxHelloField bytes.
func helloShaped(h *agentv1.Hello) bool {
	of := func(s, extra string) bool {
		if len(s) > maxHelloField {
			return false
		}
		for _, c := range []byte(s) {
			alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
			if !alnum && !strings.ContainsRune(extra, rune(c)) {
				return false
			}
		}
		return true
	}
	return h.GetJournalId() != "" && of(h.GetJournalId(), "._:-") && of(h.GetBootId(), "._:-") && of(h.GetDaemonVersion(), ".+_~-")
}
