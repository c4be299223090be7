// bcd sim --crypto-floor: what one P-256 sign, verify, key generation and
// ECDH, one X25519 exchange (TLS 1.3's key share) and one Ed25519 sign and
// verify cost bcd's crypto (Go's) on this machine, as one JSON line of
// nanoseconds, for the scale benchmark's crypto floor (docs/harness.md,
// "The scale benchmark").

package main

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// floorRounds is how many times each operation runs.
const floorRounds = 400

// cryptoFloor measures the operations and writes them to w.
func cryptoFloor(w io.Writer) error {
	digest := sha256.Sum256([]byte("bcd crypto floor"))
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	sig, err := ecdsa.SignASN1(rand.Reader, p256, digest[:])
	if err != nil {
		return err
	}
	peer, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	x25519Peer, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	edSig := ed25519.Sign(edKey, digest[:])
	edPub := edKey.Public().(ed25519.PublicKey)
	exchange := func(peer *ecdh.PrivateKey) func() error {
		return func() error {
			k, err := peer.Curve().GenerateKey(rand.Reader)
			if err == nil {
				_, err = k.ECDH(peer.PublicKey())
			}
			return err
		}
	}
	var failed error
	each := func(op func() error) int64 {
		start := time.Now()
		for range floorRounds {
			if err := op(); err != nil && failed == nil {
				failed = err
			}
		}
		return time.Since(start).Nanoseconds() / floorRounds
	}
	out := map[string]int64{
		"p256_sign_ns": each(func() error { _, err := ecdsa.SignASN1(rand.Reader, p256, digest[:]); return err }),
		"p256_verify_ns": each(func() error {
			if !ecdsa.VerifyASN1(&p256.PublicKey, digest[:], sig) {
				return fmt.Errorf("a P-256 signature did not verify")
			}
			return nil
		}),
		// A node key, as the join makes.
		"p256_keygen_ns": each(func() error { _, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader); return err }),
		// An ECDH is a fresh key and the shared secret, as a JWE ECDH-ES
		// seal makes; on X25519, the group a TLS 1.3 handshake with the
		// dev stack agrees on.
		"p256_ecdh_ns":    each(exchange(peer)),
		"x25519_ns":       each(exchange(x25519Peer)),
		"ed25519_sign_ns": each(func() error { ed25519.Sign(edKey, digest[:]); return nil }),
		"ed25519_verify_ns": each(func() error {
			if !ed25519.Verify(edPub, digest[:], edSig) {
				return fmt.Errorf("an Ed25519 signature did not verify")
			}
			return nil
		}),
	}
	if failed != nil {
		return failed
	}
	return json.NewEncoder(w).Encode(out)
}
