// Tests of TLS session resumption: real TLS 1.3 handshakes between bcd's
// client side and a server that issues tickets.
package identity

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"bcd/internal/pki"
)

// clientIdentity is an identity with a self-signed client certificate of
// its own key (the server here takes any certificate).
func clientIdentity(t *testing.T, name string) *Identity {
	t.Helper()
	id := &Identity{NodeID: name}
	id.chain, id.signer = clientCert(t, name)
	return id
}

func clientCert(t *testing.T, name string) ([][]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key := pki.DeriveP256("client", name+time.Now().String())
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{der}, key
}

// ticketServer is a gateway that issues session tickets (with a fixed
// ticket key, as the dev stack's store keeps one) and takes any client
// certificate.
func ticketServer(t *testing.T, seed string) (*tls.Config, string) {
	t.Helper()
	leaf, ca := servingPairOf(t, time.Now(), seed)
	info, err := pki.DescribeCertificate(ca)
	if err != nil {
		t.Fatal(err)
	}
	server := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{"h2"},
		ClientAuth:   tls.RequireAnyClientCert,
		Certificates: []tls.Certificate{{Certificate: [][]byte{leaf, ca}, PrivateKey: pki.DeriveP256(seed, "gateway")}},
	}
	server.SetSessionTicketKeys([][32]byte{{1, 2, 3}})
	return server, info.Pin
}

// dialed is what one connection showed on each side.
type dialed struct {
	resumed    bool
	clientLeaf []byte // the certificate the server holds for the client
}

// dial runs one connection as id with pin, reading the server's first
// byte (so that the ticket the server sent after the handshake is kept).
func dial(t *testing.T, server *tls.Config, id *Identity, pin string) (dialed, error) {
	t.Helper()
	// Loopback TCP, not a pipe: a TLS 1.3 server writes its tickets while
	// the client writes its Finished.
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	clientConn, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer clientConn.Close()
	serverConn, err := listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer serverConn.Close()
	served := make(chan []byte, 1)
	go func() {
		s := tls.Server(serverConn, server)
		if s.Handshake() != nil {
			served <- nil
			return
		}
		var leaf []byte
		if certs := s.ConnectionState().PeerCertificates; len(certs) > 0 {
			leaf = certs[0].Raw
		}
		served <- leaf
		_, _ = s.Write([]byte{1})
	}()
	cfg := ClientTLS(pin, "localhost", nil)
	id.Resumable(cfg, pin, "localhost")
	c := tls.Client(clientConn, cfg)
	if err := c.Handshake(); err != nil {
		return dialed{}, err
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return dialed{}, err
	}
	return dialed{resumed: c.ConnectionState().DidResume, clientLeaf: <-served}, nil
}

func TestAnIdentityResumesItsOwnSessionWithTheCertificateItBeganWith(t *testing.T) {
	server, pin := ticketServer(t, "s")
	id := clientIdentity(t, "node_1")
	mustDial := func(who *Identity) dialed {
		t.Helper()
		d, err := dial(t, server, who, pin)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := mustDial(id); d.resumed || !bytes.Equal(d.clientLeaf, id.Chain()[0]) {
		t.Fatalf("the first dial: resumed %v", d.resumed)
	}
	if d := mustDial(id); !d.resumed || !bytes.Equal(d.clientLeaf, id.Chain()[0]) {
		t.Fatalf("the second dial resumes as the node: resumed %v", d.resumed)
	}
	// Another identity (another agent of bcd sim) never offers node_1's session.
	other := clientIdentity(t, "node_2")
	if d := mustDial(other); d.resumed || !bytes.Equal(d.clientLeaf, other.Chain()[0]) {
		t.Fatalf("another identity: resumed %v", d.resumed)
	}
	// After a renewal, the next dial presents the new certificate in a full
	// handshake, and the one after resumes that one.
	id.mu.Lock()
	id.chain, id.signer = clientCert(t, "node_1")
	id.mu.Unlock()
	if d := mustDial(id); d.resumed || !bytes.Equal(d.clientLeaf, id.Chain()[0]) {
		t.Fatalf("after a renewal: resumed %v", d.resumed)
	}
	if d := mustDial(id); !d.resumed || !bytes.Equal(d.clientLeaf, id.Chain()[0]) {
		t.Fatalf("after a renewal, again: resumed %v", d.resumed)
	}
}

func TestAResumedConnectionIsCheckedAgainstThePinLikeAFullOne(t *testing.T) {
	first, firstPin := ticketServer(t, "s")
	second, secondPin := ticketServer(t, "t") // another serving CA, the same ticket key
	id := clientIdentity(t, "node_1")
	if _, err := dial(t, first, id, firstPin); err != nil {
		t.Fatal(err)
	}
	if d, err := dial(t, second, clientIdentity(t, "node_2"), secondPin); err != nil || d.resumed {
		t.Fatalf("a full handshake with the second server under its pin: %v (resumed %v)", err, d.resumed)
	}
	// node_1's session, begun with the first server, resumes with the
	// second: its chain (the first server's) is checked against the pin
	// the dial trusts, although crypto/tls runs no VerifyPeerCertificate
	// on a resumption. Refused.
	if _, err := dial(t, second, id, secondPin); !errors.Is(err, ErrServingPin) {
		t.Fatalf("got %v, want %v", err, ErrServingPin)
	}
	// Forgotten at once (it can never resume under this pin): the next
	// dial is a full handshake that holds.
	if d, err := dial(t, second, id, secondPin); err != nil || d.resumed {
		t.Fatalf("after the refused resumption: %v (resumed %v)", err, d.resumed)
	}
}

// cut runs one handshake as id against a server that reads the client's
// first bytes and closes the connection, as a stopping gateway cuts one.
func cut(t *testing.T, id *Identity, pin string) error {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	go func() {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		_, _ = conn.Read(make([]byte, 64))
		_ = conn.Close()
	}()
	clientConn, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer clientConn.Close()
	cfg := ClientTLS(pin, "localhost", nil)
	id.Resumable(cfg, pin, "localhost")
	return tls.Client(clientConn, cfg).Handshake()
}

func TestASessionOutlivesOneCutHandshakeAndIsForgottenAtTheSecondInARow(t *testing.T) {
	server, pin := ticketServer(t, "s")
	id := clientIdentity(t, "node_1")
	resumed := func() bool {
		t.Helper()
		d, err := dial(t, server, id, pin)
		if err != nil {
			t.Fatal(err)
		}
		return d.resumed
	}
	if resumed() {
		t.Fatal("the first dial cannot resume")
	}
	// A gateway that stops cuts the handshake: crypto/tls forgets the
	// session it offered; bcd keeps it for one more try.
	if err := cut(t, id, pin); err == nil {
		t.Fatal("a cut handshake succeeded")
	}
	if !resumed() {
		t.Fatal("after one cut handshake the session resumes")
	}
	// Resumed: trusted again, so one more cut keeps it too.
	if err := cut(t, id, pin); err == nil {
		t.Fatal("a cut handshake succeeded")
	}
	if !resumed() {
		t.Fatal("after a resumption and one more cut the session resumes")
	}
	// Two failures in a row: forgotten, a full handshake.
	for range 2 {
		if err := cut(t, id, pin); err == nil {
			t.Fatal("a cut handshake succeeded")
		}
	}
	if resumed() {
		t.Fatal("a session that failed twice in a row is forgotten")
	}
}
