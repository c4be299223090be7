// Package renew is bcd's side of Gateway.Renew (docs/protocol.md,
// "Renewal"): when 2/3 of the current certificate's validity has passed
// (or, in fakehw builds, BCD_RENEW_AFTER after bcd took the certificate
// into use), it makes the next node key (in the TPM for a TPM node, whose
// AK certifies it over SHA-256(csr_der)), calls Renew with the current
// client certificate, verifies the signed JoinResponse against the pinned
// join-signing key, the CSR pin and the node id, and commits the new chain
// (identity.CommitRenewal). The session goes on; its next handshake
// presents the new certificate. A failed renewal is retried with backoff
// while the current certificate lasts.
//
// The call goes where the session goes (https.go): Gateway.Renew over gRPC
// with gateway_url (or, with several gateways, the one the session is on:
// Config.Gateway), POST /v1/renew on the HTTPS listener with only
// [websocket] url, and with both, gRPC first and HTTPS when the gateway
// cannot be reached (not when it refuses).
package renew

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors of a renewal.
var (
	// ErrRefused wraps the gateway's refusal ("<code>: <detail>").
	ErrRefused = errors.New("renewal refused")
	// ErrResponse means the renewed JoinResponse did not verify.
	ErrResponse = errors.New("renewal response refused")
)

// The retry backoff after a failed renewal.
const (
	retryBase = 2 * time.Second
	retryCap  = 10 * time.Minute
)

// Config configures renewals.
type Config struct {
	// Identity is the node's identity; renewals replace its key and chain.
	Identity *identity.Identity
	// Config is the node's configuration (the gateway).
	Config *config.Config
	// JoinSigning verifies the renewed JoinResponse.
	JoinSigning *pki.PublicKey
	// After, when positive, renews each certificate this long after bcd
	// took it into use instead of at 2/3 of its validity (BCD_RENEW_AFTER).
	After time.Duration
	// AllowH2C permits dev_insecure_h2c (fakehw builds).
	AllowH2C bool
	// Gateway, when set, names the gateway of Config's list a gRPC
	// renewal calls, asked at each renewal (the agent's: the one its
	// session is on); nil or "" is gateway_url.
	Gateway func() string
	// Log receives renew.* lines.
	Log *slog.Logger
}

// Due is when the certificate leaf (DER) is renewed: at 2/3 of its
// validity, or after past since when after is positive.
func Due(leaf []byte, since time.Time, after time.Duration) (time.Time, error) {
	if after > 0 {
		return since.Add(after), nil
	}
	info, err := pki.DescribeCertificate(leaf)
	if err != nil {
		return time.Time{}, err
	}
	c := info.Certificate
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3), nil
}

// Run renews the certificate whenever it is due, until ctx ends.
func Run(ctx context.Context, cfg Config) {
	log := cfg.logger()
	since := time.Now()
	failures := 0
	for {
		due, err := Due(cfg.Identity.Chain()[0], since, cfg.After)
		if err != nil {
			log.Error("renew.unusable_certificate", "err", err)
			return
		}
		if failures > 0 {
			due = time.Now().Add(min(retryBase<<min(failures-1, 20), retryCap))
		}
		timer := time.NewTimer(time.Until(due))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if err := Once(ctx, cfg); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			log.Warn("renew.failed", "node_id", cfg.Identity.NodeID, "err", err, "attempt", failures)
			continue
		}
		failures = 0
		since = time.Now()
	}
}

// Once renews the certificate now.
func Once(ctx context.Context, cfg Config) error {
	id := cfg.Identity
	next, err := id.PrepareRenewal()
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			if err := id.AbortRenewal(); err != nil {
				cfg.logger().Error("renew.abort_failed", "err", err)
			}
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := &agentv1.RenewRequest{CsrDer: next.CSR, NodeKey: next.NodeKey}
	reply, transport, err := call(cctx, cfg, req)
	if err != nil {
		return err
	}
	if reply.GetResponse() == nil {
		return fmt.Errorf("%w: the reply carries no JoinResponse", ErrResponse)
	}
	env := pki.EnvelopeFromProto(reply.GetResponse())
	response, err := pki.VerifyJoinResponse(env, cfg.JoinSigning, next.Pin)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrResponse, err)
	}
	if response.GetNodeId() != id.NodeID {
		return fmt.Errorf("%w: the response is for node %q, not %q", ErrResponse, response.GetNodeId(), id.NodeID)
	}
	if err := identity.CheckChain(response, next.Pin, time.Now()); err != nil {
		return fmt.Errorf("%w: %w", ErrResponse, err)
	}
	if err := id.CommitRenewal(next, response.GetCertificateChain(), env); err != nil {
		return fmt.Errorf("storing the renewed certificate: %w", err)
	}
	committed = true
	info, _ := pki.DescribeCertificate(response.GetCertificateChain()[0])
	cfg.logger().Info("renew.renewed", "node_id", id.NodeID, "pin", next.Pin, "tpm", id.InTPM(), "transport", transport,
		"serial", fmt.Sprintf("%x", info.Serial), "not_after", info.Certificate.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// call sends the RenewRequest where the configuration says, and names the
// transport that answered.
func call(ctx context.Context, cfg Config, req *agentv1.RenewRequest) (*agentv1.RenewReply, string, error) {
	c := cfg.Config
	if !c.UsesGRPC() {
		reply, err := overHTTPS(ctx, cfg, req)
		return reply, transportHTTPS, err
	}
	reply, err := overGRPC(ctx, cfg, req)
	if err != nil && c.UsesWebsocket() && unreachable(err) {
		cfg.logger().Warn("renew.fallback", "transport", transportHTTPS, "after", err.Error())
		reply, err = overHTTPS(ctx, cfg, req)
		return reply, transportHTTPS, err
	}
	return reply, transportGRPC, err
}

// overGRPC is Gateway.Renew with the current client certificate.
func overGRPC(ctx context.Context, cfg Config, req *agentv1.RenewRequest) (*agentv1.RenewReply, error) {
	c := cfg.Config
	if cfg.Gateway != nil {
		if u := cfg.Gateway(); u != "" {
			c = c.ForGateway(u)
		}
	}
	conn, err := identity.Dial(c, identity.DialOptions{Identity: cfg.Identity, AllowH2C: cfg.AllowH2C})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	reply, err := agentv1.NewGatewayClient(conn).Renew(ctx, req)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded {
			return nil, fmt.Errorf("%w: %s", ErrRefused, st.Message())
		}
		return nil, err
	}
	return reply, nil
}

// unreachable says whether a gRPC renewal failed for want of a gateway
// (not a refusal).
func unreachable(err error) bool {
	if errors.Is(err, ErrRefused) {
		return false
	}
	code := status.Code(err)
	return code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Unknown
}

func (cfg Config) logger() *slog.Logger {
	if cfg.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return cfg.Log
}
