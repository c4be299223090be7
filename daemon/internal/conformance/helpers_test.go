// Small helpers of the conformance tests.

package conformance

import (
	"crypto/ecdsa"
	"crypto/x509"
)

func x509MarshalPKIX(k *ecdsa.PublicKey) ([]byte, error) { return x509.MarshalPKIXPublicKey(k) }
