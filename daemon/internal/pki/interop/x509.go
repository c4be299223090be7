// The X.509 family: node CSRs (csr) and certificates verified for a usage
// at a time (certificate).
// The Go twin of fixtures/src/interop/cases/x509.rs's verifiers.

package interop

import "bcd/internal/pki"

// x509Family is the x509 family's verifier of each kind.
var x509Family = family{
	name: "x509",
	kinds: map[string]verifier{
		"csr":         runCSR,
		"certificate": runCertificate,
	},
}

func runCSR(in *input) (Outcome, error) {
	der := in.bytes("csr")
	if in.err != nil {
		return Outcome{}, in.err
	}
	csr, err := pki.ParseCSR(der)
	return result(csr, err, func(c *pki.CSR) map[string]any { return map[string]any{"pin": c.Pin} })
}

func runCertificate(in *input) (Outcome, error) {
	cert, issuer, at, usageName := in.bytes("certificate"), in.bytes("issuer"), in.time("at"), in.string("usage")
	usage, valid := pki.ParseUsage(usageName)
	if !valid {
		in.fail("usage %q", usageName)
	}
	opts := pki.VerifyOptions{Usage: usage, At: at}
	if in.has("dnsName") {
		opts.DNSName = in.string("dnsName")
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	info, err := pki.VerifyIssued(cert, issuer, opts)
	return result(info, err, func(info *pki.CertificateInfo) map[string]any {
		ips := make([]string, 0, len(info.IPs))
		for _, ip := range info.IPs {
			ips = append(ips, ip.String())
		}
		return map[string]any{
			"commonName":  info.CommonName,
			"uris":        nonNil(info.URIs),
			"dnsNames":    nonNil(info.DNSNames),
			"ips":         ips,
			"pin":         info.Pin,
			"isCa":        info.IsCA,
			"notBeforeMs": info.NotBefore.UnixMilli(),
			"notAfterMs":  info.NotAfter.UnixMilli(),
		}
	})
}
