// The key-exchange groups bcd offers the gateway. Go's default ClientHello
// carries two key shares, the post-quantum hybrid X25519MLKEM768 and
// X25519; a gateway without post-quantum key exchange (the dev stack's
// rustls on ring) agrees on X25519 and ignores the ML-KEM half, which bcd
// generated for nothing at every handshake (in bcd sim, 2.6 % of its CPU).
// So when a completed handshake shows that a gateway, offered the hybrid,
// agreed on a classical group, the dials to it for the next hour offer the
// classical groups only; then the hybrid is offered again, so a gateway
// that gained post-quantum key exchange is using it within the hour. Only a
// completed handshake counts (grpc-go returns its state after the server's
// Finished verified): a forged ServerHello cannot steer the choice.

package identity

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// ClassicalMemory is how long a gateway's agreeing on a classical group
// keeps the hybrid out of the dials to it.
const ClassicalMemory = time.Hour

// classicalGroups are what a dial offers in that hour (no post-quantum
// hybrid: Go sends the one share of X25519).
var classicalGroups = []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521}

// agreedGroups remembers, per gateway server name, until when it is
// offered the classical groups only.
var agreedGroups = groupMemory{classicalUntil: map[string]time.Time{}}

type groupMemory struct {
	mu             sync.Mutex
	classicalUntil map[string]time.Time
}

// offer is the CurvePreferences of a dial to serverName at now: nil (Go's
// default, the hybrid first) unless the classical hour runs.
func (g *groupMemory) offer(serverName string, now time.Time) []tls.CurveID {
	g.mu.Lock()
	defer g.mu.Unlock()
	if until, ok := g.classicalUntil[serverName]; ok && now.Before(until) {
		return classicalGroups
	}
	return nil
}

// agreed records the group a completed handshake to serverName agreed on,
// when that handshake offered the hybrid.
func (g *groupMemory) agreed(serverName string, group tls.CurveID, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if slices.Contains(classicalGroups, group) {
		g.classicalUntil[serverName] = now.Add(ClassicalMemory)
	} else {
		delete(g.classicalUntil, serverName)
	}
}

// groupLearning is TLS transport credentials that record the group of each
// completed handshake of a dial that offered the hybrid.
type groupLearning struct {
	credentials.TransportCredentials
	serverName string
}

// learningGroups wraps the credentials of a dial whose TLS configuration
// is cfg: a dial that offers only the classical groups learns nothing.
func learningGroups(creds credentials.TransportCredentials, cfg *tls.Config) credentials.TransportCredentials {
	if cfg.CurvePreferences != nil {
		return creds
	}
	return groupLearning{TransportCredentials: creds, serverName: cfg.ServerName}
}

func (g groupLearning) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := g.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if tlsInfo, ok := info.(credentials.TLSInfo); err == nil && ok && tlsInfo.State.HandshakeComplete {
		agreedGroups.agreed(g.serverName, tlsInfo.State.CurveID, time.Now())
	}
	return conn, info, err
}

func (g groupLearning) Clone() credentials.TransportCredentials {
	return groupLearning{TransportCredentials: g.TransportCredentials.Clone(), serverName: g.serverName}
}
