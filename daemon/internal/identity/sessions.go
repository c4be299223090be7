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

package identity

import (
	"bytes"
	"crypto/tls"
	"sync"
	"time"
)

// sessionCache holds an identity's TLS sessions by Go's session key (the
// gateway's server name), each with the leaf certificate it began with.
type sessionCache struct {
	mu       sync.Mutex
	sessions map[string]cachedSession
}

type cachedSession struct {
	leaf  []byte
	state *tls.ClientSessionState
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
// forgets it (nil: crypto/tls found it expired or refused).
func (s leafSessions) Put(key string, state *tls.ClientSessionState) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if state == nil {
		delete(s.cache.sessions, key)
		return
	}
	if s.cache.sessions == nil {
		s.cache.sessions = map[string]cachedSession{}
	}
	s.cache.sessions[key] = cachedSession{leaf: s.leaf, state: state}
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
	cfg.ClientSessionCache = id.sessions.forLeaf(cert.Certificate[0])
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
		return verify(raw, nil)
	}
}
