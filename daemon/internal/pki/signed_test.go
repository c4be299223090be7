// Tests of the envelope reader, on the vectors of the Rust side's
// pki/src/x509/signed.rs: the same TLVs are read and refused, and the P-256
// key has one SPKI form.

package pki

import (
	"bytes"
	"crypto/elliptic"
	"crypto/x509"
	"testing"
)

func TestTLVsAreReadAsDER(t *testing.T) {
	long := append([]byte{0x30, 0x81, 0x80}, make([]byte, 0x80)...)
	for _, input := range [][]byte{{0x04, 0x00}, {0x04, 0x01, 0xff}, long} {
		got, rest, err := readTLV(input)
		if err != nil || len(rest) != 0 || !bytes.Equal(got.whole, input) {
			t.Errorf("%x: %v", input, err)
		}
	}
	for _, input := range [][]byte{
		{},
		{0x04},
		{0x1f, 0x00},                // high tag number
		{0x30, 0x80, 0x00, 0x00},    // indefinite
		{0x04, 0x81, 0x7f},          // long form below 128
		{0x04, 0x82, 0x00, 0x80},    // a leading zero octet
		{0x04, 0x85, 1, 0, 0, 0, 0}, // five length octets
		{0x04, 0x02, 0x00},          // truncated contents
	} {
		if _, _, err := readTLV(input); err == nil {
			t.Errorf("%x: read", input)
		}
	}
	if _, _, err := readTLV([]byte{0x04, 0x81, 0x80}); err == nil || err.Error() != "contents longer than the input" {
		t.Errorf("a length past the end: %v", err)
	}
}

func TestTheP256SPKIIsOneExactForm(t *testing.T) {
	key := &DeriveP256("s", "k").PublicKey
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := parseP256SPKI(der); err != nil || !got.Equal(key) {
		t.Fatalf("the SPKI Go writes: %v", err)
	}
	point := elliptic.MarshalCompressed(elliptic.P256(), key.X, key.Y)
	compressed := append(append([]byte{0x30, byte(len(p256SPKIPrefix[2:23]) + 3 + len(point))}, p256SPKIPrefix[2:23]...), 0x03, byte(1+len(point)), 0x00)
	compressed = append(compressed, point...)
	if _, err := parseP256SPKI(compressed); err == nil {
		t.Error("a compressed point")
	}
	off := bytes.Clone(der)
	off[90] ^= 1
	if _, err := parseP256SPKI(off); err == nil || err.Error() != "the point is not on P-256" {
		t.Errorf("a point off the curve: %v", err)
	}
}
