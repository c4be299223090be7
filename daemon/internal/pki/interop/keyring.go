// The named fixture keys of a document, derived from its seed; the labels
// and their algorithms come from the document's keys section.

package interop

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"fmt"

	"bcd/internal/pki"
)

// Keyring derives the keys of one document.
type Keyring struct {
	seed  string
	algs  map[string]string // label → "ed25519" or "p256"
	pins  map[string]string // pin → label
	cache map[string]any    // label → ed25519.PrivateKey or *ecdsa.PrivateKey
}

// NewKeyring returns the keyring of seed for the labels of keys.
func NewKeyring(seed string, keys []KeyEntry) *Keyring {
	k := &Keyring{seed: seed, algs: map[string]string{}, pins: map[string]string{}, cache: map[string]any{}}
	for _, e := range keys {
		k.algs[e.Label] = e.Alg
	}
	for _, e := range keys {
		if pub, err := k.Public(e.Label); err == nil {
			k.pins[pub.Pin()] = e.Label
		}
	}
	return k
}

// Ed returns the Ed25519 key of label.
func (k *Keyring) Ed(label string) (ed25519.PrivateKey, error) {
	if k.algs[label] != "ed25519" {
		return nil, fmt.Errorf("%q is not an Ed25519 fixture key", label)
	}
	if key, ok := k.cache[label]; ok {
		return key.(ed25519.PrivateKey), nil
	}
	key := pki.DeriveEd25519(k.seed, label)
	k.cache[label] = key
	return key, nil
}

// P256 returns the P-256 key of label.
func (k *Keyring) P256(label string) (*ecdsa.PrivateKey, error) {
	if k.algs[label] != "p256" {
		return nil, fmt.Errorf("%q is not a P-256 fixture key", label)
	}
	if key, ok := k.cache[label]; ok {
		return key.(*ecdsa.PrivateKey), nil
	}
	key := pki.DeriveP256(k.seed, label)
	k.cache[label] = key
	return key, nil
}

// Public returns the public key of label, whatever its algorithm.
func (k *Keyring) Public(label string) (*pki.PublicKey, error) {
	switch k.algs[label] {
	case "ed25519":
		key, _ := k.Ed(label)
		return pki.NewPublicKey(key.Public())
	case "p256":
		key, _ := k.P256(label)
		return pki.NewPublicKey(&key.PublicKey)
	}
	return nil, fmt.Errorf("unknown fixture key %q", label)
}

// labelOfPin returns the label whose key has pin, if any.
func (k *Keyring) labelOfPin(pin string) (string, bool) {
	label, ok := k.pins[pin]
	return label, ok
}
