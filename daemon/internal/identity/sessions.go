// TLS session resumption with the gateway (docs/protocol.md, "Services and
// transport"): each identity keeps the TLS sessions its dials to the
// gateway began, so that a reconnection (after a gateway restart, a Drain,
// a failover to another gateway of the same store) resumes one: no
// certificate to verify and no signature on either side, only the key
// exchange. A session is the identity's alone (a ticket carries the client
// certificate the session began with: an agent of bcd sim never offers
// another's), and it is offered only by a dial that presents the same
// certificate: after a renewal the next dial makes a full handshake with
// the new one. The cache is in memory: a restarted bcd begins anew.
//
// crypto/tls forgets a session whenever a handshake that offered it fails
// (to recover from a corrupted ticket), and that includes a connection the
// gateway cut mid-handshake as it stopped: a quarter of 10,000 agents
// reconnecting across a restart lost their sessions so and paid a full
// handshake. Here a session survives one failed handshake and is
// forgotten at the second in a row; a session whose server chain the pin
// refuses is forgotten at once (it can never resume), and one that
// resumed is trusted again.

package identity

import (
	"bytes"
	"context"
	"crypto/tls"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// DidResume says whether the TLS connection of a gRPC call or stream (its
// peer in ctx) resumed a session: either side logs it so.
func DidResume(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && info.State.DidResume
}

// sessionCache holds an identity's TLS sessions by Go's session key (the
// gateway's server name), each with the leaf certificate it began with.
type sessionCache struct {
	mu       sync.Mutex
	sessions map[string]cachedSession
}

type cachedSession struct {
	leaf  []byte
	state *tls.ClientSessionState
	// failed: a handshake that offered it failed since it last resumed.
	failed bool
}

// forLeaf is the cache as a dial presenting leaf sees it: it finds only
// sessions begun with leaf, and what it keeps began with leaf.
func (c *sessionCache) forLeaf(leaf []byte) tls.ClientSessionCache {
	return leafSessions{cache: c, leaf: leaf}
}

type leafSessions struct {
	cache *sessionCache
	leaf  []byte
}

// Get returns the session kept for key if it began with this dial's leaf.
func (s leafSessions) Get(key string) (*tls.ClientSessionState, bool) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	kept, ok := s.cache.sessions[key]
	if !ok || !bytes.Equal(kept.leaf, s.leaf) {
		return nil, false
	}
	return kept.state, true
}

// Put keeps a session for key (one per key: a later ticket replaces it), or
// (nil: crypto/tls found it expired, or a handshake that offered it failed)
// marks it failed, and forgets it if it had failed already.
func (s leafSessions) Put(key string, state *tls.ClientSessionState) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if state == nil {
		kept, ok := s.cache.sessions[key]
		if ok && !kept.failed && bytes.Equal(kept.leaf, s.leaf) {
			kept.failed = true
			s.cache.sessions[key] = kept
			return
		}
		delete(s.cache.sessions, key)
		return
	}
	if s.cache.sessions == nil {
		s.cache.sessions = map[string]cachedSession{}
	}
	s.cache.sessions[key] = cachedSession{leaf: s.leaf, state: state}
}

// settle records how a resumption with leaf's sessions ended: trusted
// again when it held, forgotten when its server chain was refused.
func (c *sessionCache) settle(leaf []byte, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, kept := range c.sessions {
		switch {
		case !bytes.Equal(kept.leaf, leaf):
		case held:
			kept.failed = false
			c.sessions[key] = kept
		default:
			delete(c.sessions, key)
		}
	}
}

// Resumable makes cfg, a dial to the gateway as id, resume id's sessions:
// it presents the certificate id has now (so the sessions it keeps are
// that certificate's) and checks a resumed connection's server chain as a
// full handshake's is checked (VerifyServer, which crypto/tls does not run
// on a resumption; in the common case the chain is the one this process
// verified last, and nothing is verified again).
func (id *Identity) Resumable(cfg *tls.Config, pin, serverName string) {
	cert := id.Certificate()
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	leaf := cert.Certificate[0]
	cfg.ClientSessionCache = id.sessions.forLeaf(leaf)
	verify := cfg.VerifyPeerCertificate
	if verify == nil {
		verify = VerifyServer(pin, serverName, time.Now)
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if !cs.DidResume {
			return nil // VerifyPeerCertificate ran
		}
		raw := make([][]byte, len(cs.PeerCertificates))
		for i, c := range cs.PeerCertificates {
			raw[i] = c.Raw
		}
		err := verify(raw, nil)
		id.sessions.settle(leaf, err == nil)
		return err
	}
}
