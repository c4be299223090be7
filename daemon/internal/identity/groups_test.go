// Tests of the key-exchange groups bcd offers: real TLS handshakes with a
// gateway that has post-quantum key exchange and one that has not.
package identity

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"bcd/internal/pki"
	"google.golang.org/grpc/credentials"
)

// handshake runs bcd's client side of a dial against a TLS server offering
// groups, and returns the group they agreed on.
func handshake(t *testing.T, groups []tls.CurveID) tls.CurveID {
	t.Helper()
	leaf, ca := servingPair(t, time.Now())
	info, err := pki.DescribeCertificate(ca)
	if err != nil {
		t.Fatal(err)
	}
	server := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		NextProtos:       []string{"h2"},
		CurvePreferences: groups,
		Certificates:     []tls.Certificate{{Certificate: [][]byte{leaf, ca}, PrivateKey: pki.DeriveP256("s", "gateway")}},
	}
	clientConn, serverConn := net.Pipe()
	defer clientConn.Close()
	defer serverConn.Close()
	served := make(chan error, 1)
	go func() { served <- tls.Server(serverConn, server).Handshake() }()
	cfg := ClientTLS(info.Pin, "localhost", nil)
	creds := learningGroups(credentials.NewTLS(cfg), cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, auth, err := creds.ClientHandshake(ctx, "localhost", clientConn)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	return auth.(credentials.TLSInfo).State.CurveID
}

func TestAGatewayThatAgreedOnAClassicalGroupIsOfferedNoHybridForAnHour(t *testing.T) {
	agreedGroups = groupMemory{classicalUntil: map[string]time.Time{}}
	lastVerified = verifiedPair{}
	if got := agreedGroups.offer("localhost", time.Now()); got != nil {
		t.Fatalf("a gateway never dialed is offered %v, want Go's default", got)
	}
	if got := handshake(t, []tls.CurveID{tls.X25519MLKEM768, tls.X25519}); got != tls.X25519MLKEM768 {
		t.Fatalf("a post-quantum gateway agreed on %v", got)
	}
	if got := agreedGroups.offer("localhost", time.Now()); got != nil {
		t.Fatalf("after a hybrid agreement the offer is %v, want Go's default", got)
	}
	if got := handshake(t, []tls.CurveID{tls.X25519, tls.CurveP256}); got != tls.X25519 {
		t.Fatalf("a classical gateway agreed on %v", got)
	}
	now := time.Now()
	if got := agreedGroups.offer("localhost", now); len(got) == 0 || got[0] != tls.X25519 {
		t.Fatalf("after a classical agreement the offer is %v, want the classical groups", got)
	}
	if got := agreedGroups.offer("other.example", now); got != nil {
		t.Fatalf("another gateway is offered %v", got)
	}
	// A dial of the classical hour learns nothing, so the hour is not
	// renewed by the handshakes it shapes.
	cfg := ClientTLS("sha256/AAAA", "localhost", nil)
	if _, learns := learningGroups(credentials.NewTLS(cfg), cfg).(groupLearning); learns {
		t.Fatal("a classical-only dial learns")
	}
	if got := agreedGroups.offer("localhost", now.Add(ClassicalMemory+time.Second)); got != nil {
		t.Fatalf("after the hour the offer is %v, want Go's default again", got)
	}
}
