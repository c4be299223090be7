// The TPM join (docs/protocol.md, "TPM join (two rounds)"): round 1 sends
// the EK, its certificate from NV and a fresh AK, and gets a challenge;
// round 2 activates the credential, quotes PCRs 0–7 over the nonce, makes
// the node key in the TPM, has the AK certify it, and sends the CSR signed
// by that key. Nothing secret leaves the TPM or reaches the log.

package join

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/tpm"
)

// ErrNoTPM means a TPM join was asked for and this bcd has no TPM.
var ErrNoTPM = errors.New("no TPM to join with")

// joinTPM runs both rounds and returns the node key (in the TPM), the CSR's
// pin and the signed JoinResponse.
func joinTPM(ctx context.Context, client agentv1.JoinClient, c *config.Config, opts Options, log *slog.Logger) (crypto.Signer, string, *agentv1.Envelope, error) {
	if opts.TPM == nil {
		return nil, "", nil, ErrNoTPM
	}
	t, err := opts.TPM()
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: %w", ErrNoTPM, err)
	}
	round1, err := tpm.BeginJoin(t, tpm.AKHandle)
	if err != nil {
		return nil, "", nil, fmt.Errorf("TPM round 1: %w", err)
	}
	ek := sha256.Sum256(round1.EKPublic)
	log.Info("join.tpm_round1", "gateway", c.GatewayURL, "ek_sha256", hex.EncodeToString(ek[:]))
	reply, err := call(ctx, client, &agentv1.JoinRequest{
		Method: &agentv1.JoinRequest_TpmRound1{TpmRound1: &agentv1.TpmRound1{
			EkPublic: round1.EKPublic, EkCertificate: round1.EKCertificate, AkPublic: round1.AKPublic,
		}},
		Claims: claims(opts),
	}, opts, log)
	if err != nil {
		return nil, "", nil, err
	}
	ch := reply.GetChallenge()
	if ch == nil {
		return nil, "", nil, fmt.Errorf("%w: round 1 was answered without a challenge", ErrResponse)
	}
	answer, key, err := tpm.AnswerChallenge(t, tpm.AKHandle, tpm.NodeKeyHandle, &tpm.Challenge{
		CredentialBlob: ch.GetCredentialBlob(), EncryptedSecret: ch.GetEncryptedSecret(), Nonce: ch.GetNonce(),
	}, "bcd")
	if err != nil {
		return nil, "", nil, fmt.Errorf("TPM round 2: %w", err)
	}
	var signer crypto.Signer = key
	if opts.TPMOtherCSRKey {
		other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, "", nil, err
		}
		if answer.CSR, err = pki.CreateCSR(rand.Reader, other, "bcd"); err != nil {
			return nil, "", nil, err
		}
		signer = other
		log.Warn("join.tpm_other_csr_key", "note", "fakehw knob: the CSR is signed by a software key, not the TPM node key the AK certified")
	}
	csr, err := pki.ParseCSR(answer.CSR)
	if err != nil {
		return nil, "", nil, err
	}
	log.Info("join.tpm_round2", "gateway", c.GatewayURL, "csr_pin", csr.Pin)
	reply, err = call(ctx, client, &agentv1.JoinRequest{
		Method: &agentv1.JoinRequest_TpmRound2{TpmRound2: &agentv1.TpmRound2{
			SessionId:       ch.GetSessionId(),
			ActivatedSecret: answer.ActivatedSecret,
			Quote: &agentv1.TpmQuote{
				Attest: answer.Quote.Attest, Signature: answer.Quote.Signature, PcrValues: answer.PCRValues,
			},
			NodeKey: &agentv1.TpmCertification{
				Public: answer.NodeKey.Public, Attest: answer.NodeKey.Certify.Attest, Signature: answer.NodeKey.Certify.Signature,
			},
			CsrDer: answer.CSR,
		}},
		Claims: claims(opts),
	}, opts, log)
	if err != nil {
		return nil, "", nil, err
	}
	return signer, csr.Pin, reply.GetResponse(), nil
}
