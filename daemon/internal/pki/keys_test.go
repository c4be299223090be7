// Tests of key derivation, public keys and signing through crypto.Signer.

package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"testing"
)

func TestP256DerivationSkipsOutOfRangeScalars(t *testing.T) {
	n := elliptic.P256().Params().N.FillBytes(make([]byte, 32))
	var asked []string
	key := p256FromOKM("node/0", func(info string) [32]byte {
		asked = append(asked, info)
		var okm [32]byte
		switch info {
		case "node/0":
			copy(okm[:], n) // n itself is out of range
		case "node/0#1": // 0 is out of range
		default:
			okm[31] = 7
		}
		return okm
	})
	if len(asked) != 3 || asked[2] != "node/0#2" {
		t.Fatalf("asked %v", asked)
	}
	if key.D.Int64() != 7 {
		t.Fatalf("scalar %v, want 7", key.D)
	}
}

func TestDerivationIsStableAndLabelSeparated(t *testing.T) {
	if OKM("s", "a") != OKM("s", "a") || OKM("s", "a") == OKM("s", "b") || OKM("s", "a") == OKM("t", "a") {
		t.Fatal("OKM is not a function of seed and label")
	}
	if !DeriveP256("s", "x").Equal(DeriveP256("s", "x")) || !DeriveEd25519("s", "x").Equal(DeriveEd25519("s", "x")) {
		t.Fatal("derivation is not stable")
	}
}

func TestPublicKeysRoundTripAndRefuseOthers(t *testing.T) {
	for _, signer := range []crypto.Signer{DeriveEd25519("s", "x"), DeriveP256("s", "y")} {
		pub, err := PublicKeyOf(signer)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParsePublicKey(pub.SPKI())
		if err != nil || !again.Equal(pub) || again.Pin() != PinSPKI(pub.SPKI()) {
			t.Fatalf("SPKI round trip: %v", err)
		}
		if fromProto, err := PublicKeyFromProto(pub.Proto()); err != nil || !fromProto.Equal(pub) {
			t.Fatalf("proto round trip: %v", err)
		}
		msg := pub.Proto()
		msg.Keyid = "sha256:other"
		if _, err := PublicKeyFromProto(msg); !errors.Is(err, CodeBadPublicKey) {
			t.Fatalf("a keyid that is not the pin: %v", err)
		}
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if _, err := NewPublicKey(&p384.PublicKey); !errors.Is(err, CodeBadPublicKey) {
		t.Fatalf("a P-384 key: %v", err)
	}
	if _, err := ParsePublicKey([]byte{0x30, 0x00}); !errors.Is(err, CodeBadPublicKey) {
		t.Fatalf("garbage: %v", err)
	}
}

// opaqueSigner hides the key behind crypto.Signer, as a TPM-held key does.
type opaqueSigner struct{ key *ecdsa.PrivateKey }

func (s opaqueSigner) Public() crypto.PublicKey { return &s.key.PublicKey }

func (s opaqueSigner) Sign(rand io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts.HashFunc() != crypto.SHA256 || len(digest) != 32 {
		return nil, errors.New("a TPM signs SHA-256 digests only")
	}
	return ecdsa.SignASN1(rand, s.key, digest)
}

func TestSignaturesVerifyOnlyOverTheirMessage(t *testing.T) {
	for _, signer := range []crypto.Signer{DeriveEd25519("s", "x"), DeriveP256("s", "y"), opaqueSigner{DeriveP256("s", "z")}} {
		sig, err := SignMessage(rand.Reader, signer, []byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := PublicKeyOf(signer)
		if !pub.Verify([]byte("m"), sig) || pub.Verify([]byte("n"), sig) {
			t.Fatalf("%T: verification is wrong", signer)
		}
	}
}
