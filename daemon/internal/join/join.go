// Package join is `bcd join` (docs/protocol.md, "Join" and "TPM join (two rounds)"):
// optionally the well-known document (--server), then either a fresh P-256
// node key and its CSR with the token sealed to the pinned join-encryption
// key and bound to the CSR, in one Join call, or the two TPM rounds
// (tpm.go); over pinned TLS; the signed JoinResponse verified against the
// pinned join-signing key and the CSR pin, and the identity written.
// The token is a secret: it is never logged, printed or put in an error.
package join

import (
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/machine"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/retry"
	"bcd/internal/tpm"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors of a join.
var (
	// ErrAlreadyJoined means the configuration and data dir hold an identity.
	ErrAlreadyJoined = errors.New("already joined")
	// ErrNoToken means no token was given.
	ErrNoToken = errors.New("no join token (pipe it on standard input or use --token-file)")
	// ErrPin means a key or document does not match its pin.
	ErrPin = errors.New("pin mismatch")
	// ErrRefused wraps the gateway's refusal ("<code>: <detail>").
	ErrRefused = errors.New("join refused")
	// ErrUnreachable means no Join call got through (network, or bcd
	// refused the gateway's certificate: serving-ca-pin, serving-certificate).
	ErrUnreachable = errors.New("cannot reach the JoinService")
	// ErrResponse means the JoinResponse did not verify.
	ErrResponse = errors.New("join response refused")
	// ErrWellKnown means the well-known document could not be used.
	ErrWellKnown = errors.New("well-known document")
	// ErrAttestor means an attestor bcd does not know was asked for.
	ErrAttestor = errors.New("unknown attestor (token or tpm)")
)

// The attestors of Options.Attestor.
const (
	// AttestorToken joins with a join token (the default).
	AttestorToken = "token"
	// AttestorTPM joins in two rounds with the TPM, without a token.
	AttestorTPM = "tpm"
)

// WellKnownPath is where a control plane publishes its document.
const WellKnownPath = "/.well-known/better-compute"

// Options are a join's inputs.
type Options struct {
	// ConfigPath is config.toml.
	ConfigPath string
	// Token is the plain join token (a secret).
	Token string
	// Server is the control plane's base URL (--server), or "".
	Server string
	// TrustDocument takes the pins from the well-known document without
	// flags, and allows http:// (fakehw builds only).
	TrustDocument bool
	// Pins given on the command line, which the document must match.
	ServingCAPin, JoinSigningPin, JoinEncryptionPin string
	// DataDir is the data dir for a configuration --server writes ("":
	// data/ next to config.toml).
	DataDir string
	// Machine provides the claims.
	Machine machine.Machine
	// Version is bcd's version (a claim).
	Version string
	// Capabilities are claims.
	Capabilities []string
	// AllowH2C permits dev_insecure_h2c.
	AllowH2C bool
	// Log receives join.* lines.
	Log *slog.Logger
	// HTTP fetches the document (default http.DefaultClient with a timeout).
	HTTP *http.Client
	// Attestor is AttestorToken ("" too) or AttestorTPM.
	Attestor string
	// TPM opens the TPM of a TPM join (the caller closes it).
	TPM func() (*tpm.TPM, error)
	// Retry shapes the retries of a Join call that failed for a transient
	// reason (internal/retry); the zero Policy is DefaultRetry.
	Retry *retry.Policy
	// TPMOtherCSRKey signs round 2's CSR with a software key instead of the
	// certified TPM node key, so that the attestor refuses it
	// (node-key-not-csr). A fakehw knob (BCD_FAKEHW_TPM_CSR_KEY=other).
	TPMOtherCSRKey bool
}

// Result is what a join produced.
type Result struct {
	// NodeID is the new node id.
	NodeID string
	// DataDir holds the identity.
	DataDir string
	// Identity is the identity written, as identity.Open would read it
	// back (identity.Joined; nil after a TPM join, or when the node had
	// joined before).
	Identity *identity.Identity
	// Config is the node's configuration as config.Load reads it now,
	// node_id included.
	Config *config.Config
}

// AlreadyJoined reports whether the configuration at path names a node
// whose identity is in its data dir.
func AlreadyJoined(path string) (*Result, bool) {
	c, err := config.Load(path)
	if err != nil {
		return nil, false
	}
	return joinedAs(c)
}

// joinedAs is AlreadyJoined for a configuration read.
func joinedAs(c *config.Config) (*Result, bool) {
	if c.NodeID == "" || !identity.Exists(c.DataDir) {
		return nil, false
	}
	return &Result{NodeID: c.NodeID, DataDir: c.DataDir, Config: c}, true
}

// Document is the well-known document.
type Document struct {
	Gateway struct {
		URL              string `json:"url"`
		ServerName       string `json:"serverName"`
		ServingCASPKIPin string `json:"servingCaSpkiPin"`
	} `json:"gateway"`
	Join struct {
		SigningPin    string          `json:"signingPin"`
		SigningKey    string          `json:"signingKey"`
		EncryptionPin string          `json:"encryptionPin"`
		EncryptionJWK json.RawMessage `json:"encryptionJwk"`
	} `json:"join"`
	TrustDomain string `json:"trustDomain"`
	// Gateways are every gateway a node may dial (gateways.go).
	Gateways []DocumentGateway `json:"gateways"`
}

// Join runs a join. It returns ErrAlreadyJoined (with the result) when the
// node has joined before.
func Join(ctx context.Context, opts Options) (*Result, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, loadErr := config.Load(opts.ConfigPath)
	if loadErr == nil {
		if r, ok := joinedAs(c); ok {
			return r, ErrAlreadyJoined
		}
	}
	if opts.Server != "" {
		if err := bootstrap(ctx, opts, log); err != nil {
			return nil, err
		}
		c, loadErr = config.Load(opts.ConfigPath) // as bootstrap wrote it
	}
	tpmJoin := false
	switch opts.Attestor {
	case "", AttestorToken:
		if strings.TrimSpace(opts.Token) == "" {
			return nil, ErrNoToken
		}
	case AttestorTPM:
		tpmJoin = true
	default:
		return nil, fmt.Errorf("%w: %q", ErrAttestor, opts.Attestor)
	}
	if loadErr != nil {
		return nil, loadErr
	}
	signing, err := identity.JoinSigningKey(c)
	if err != nil {
		return nil, err
	}
	conn, err := identity.Dial(c, identity.DialOptions{AllowH2C: opts.AllowH2C})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := agentv1.NewJoinClient(conn)
	var key crypto.Signer
	var csrPin string
	var envMsg *agentv1.Envelope
	if tpmJoin {
		key, csrPin, envMsg, err = joinTPM(ctx, client, c, opts, log)
	} else {
		key, csrPin, envMsg, err = joinToken(ctx, client, c, opts, log)
	}
	if err != nil {
		return nil, err
	}
	if envMsg == nil {
		return nil, fmt.Errorf("%w: the reply carries no JoinResponse", ErrResponse)
	}
	env := pki.EnvelopeFromProto(envMsg)
	response, err := pki.VerifyJoinResponse(env, signing, csrPin)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrResponse, err)
	}
	if err := identity.CheckChain(response, csrPin, time.Now()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrResponse, err)
	}
	id, err := identity.Joined(c.DataDir, key, response)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrResponse, err)
	}
	if err := identity.Save(c.DataDir, key, response.GetCertificateChain(), env); err != nil {
		return nil, fmt.Errorf("writing the identity: %w", err)
	}
	if err := config.Set(c.Path, map[string]string{"node_id": response.GetNodeId()}, nil); err != nil {
		return nil, fmt.Errorf("writing node_id into %s: %w", c.Path, err)
	}
	c.NodeID = response.GetNodeId() // what Set wrote, so the file need not be read again
	log.Info("join.joined", "node_id", response.GetNodeId(), "trust_domain", response.GetTrustDomain(),
		"command_roots", len(response.GetTrust().GetCommandRoots()), "attestor", cmp.Or(opts.Attestor, AttestorToken))
	return &Result{NodeID: response.GetNodeId(), DataDir: c.DataDir, Identity: id, Config: c}, nil
}

// joinToken is the token join's one round: a fresh software key, its CSR,
// the sealed token bound to it.
func joinToken(ctx context.Context, client agentv1.JoinClient, c *config.Config, opts Options, log *slog.Logger) (crypto.Signer, string, *agentv1.Envelope, error) {
	encryption, err := readJWK(c.JWKPath(), c.JoinEncryptionPin)
	if err != nil {
		return nil, "", nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", nil, err
	}
	csrDER, err := pki.CreateCSR(rand.Reader, key, "bcd")
	if err != nil {
		return nil, "", nil, err
	}
	public, err := pki.PublicKeyOf(key)
	if err != nil {
		return nil, "", nil, err
	}
	csrPin := public.Pin()
	sealed, err := pki.SealJoinToken(encryption, strings.TrimSpace(opts.Token), csrPin, time.Now().Unix())
	if err != nil {
		return nil, "", nil, fmt.Errorf("sealing the token: %w", err)
	}
	log.Info("join.request", "gateway", c.GatewayURL, "csr_pin", csrPin)
	reply, err := call(ctx, client, &agentv1.JoinRequest{
		Method: &agentv1.JoinRequest_Token{Token: &agentv1.TokenJoin{SealedToken: sealed, CsrDer: csrDER}},
		Claims: claims(opts),
	}, opts, log)
	if err != nil {
		return nil, "", nil, err
	}
	if reply.GetResponse() == nil {
		return nil, "", nil, fmt.Errorf("%w: the reply carries no JoinResponse (a TPM challenge?)", ErrResponse)
	}
	return key, csrPin, reply.GetResponse(), nil
}

// CallTimeout bounds one attempt of a Join call.
const CallTimeout = 30 * time.Second

// DefaultRetry is `bcd join`'s retry policy: full jitter from 250 ms to a
// 10 s cap, for at most 5 minutes in all.
var DefaultRetry = retry.Policy{Base: 250 * time.Millisecond, Cap: 10 * time.Second, Budget: 5 * time.Minute}

// call makes a Join call, the same request again after a transient failure
// (the JoinService answers a request retried byte for byte with the same
// node and certificate), its refusal turned into a one-line reason.
func call(ctx context.Context, client agentv1.JoinClient, req *agentv1.JoinRequest, opts Options, log *slog.Logger) (*agentv1.JoinReply, error) {
	p := DefaultRetry
	if opts.Retry != nil {
		p = *opts.Retry
	}
	p.Permanent = identity.IsCertificateRefusal
	p.OnRetry = func(attempt int, err error, wait time.Duration) {
		log.Warn("join.retry", "attempt", attempt, "wait_ms", wait.Milliseconds(), "err", err)
	}
	reply, err := retry.Unary(ctx, p, func(ctx context.Context, callOpts ...grpc.CallOption) (*agentv1.JoinReply, error) {
		cctx, cancel := context.WithTimeout(ctx, CallTimeout)
		defer cancel()
		return client.Join(cctx, req, callOpts...)
	})
	if err != nil {
		return nil, refusal(err)
	}
	return reply, nil
}

// refusal turns a gRPC error into a one-line reason: the status message is
// "<code>: <detail>" by contract.
func refusal(err error) error {
	st, ok := status.FromError(err)
	if !ok || errors.Is(err, retry.ErrBudget) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	msg := strings.ReplaceAll(st.Message(), "\n", " ")
	if st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded {
		return fmt.Errorf("%w: %s", ErrUnreachable, msg)
	}
	return fmt.Errorf("%w: %s", ErrRefused, msg)
}

func claims(opts Options) *agentv1.NodeClaims {
	c := &agentv1.NodeClaims{DaemonVersion: opts.Version, Capabilities: opts.Capabilities}
	if m := opts.Machine; m != nil {
		c.Hostname, c.HardwareId = m.Hostname(), m.HardwareID()
	}
	return c
}

// readJWK reads join-encryption.jwk and checks it against pin.
func readJWK(path, pin string) (*ecdsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the join-encryption key: %w", err)
	}
	return parseJWK(data, pin)
}

func parseJWK(data []byte, pin string) (*ecdsa.PublicKey, error) {
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON([]byte(strings.TrimSpace(string(data)))); err != nil {
		return nil, fmt.Errorf("the join-encryption JWK: %w", err)
	}
	pub, ok := jwk.Key.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, errors.New("the join-encryption JWK is not a P-256 public key")
	}
	key, err := pki.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if key.Pin() != pin {
		return nil, fmt.Errorf("%w: the join-encryption key's pin %s is not join_encryption_pin %s", ErrPin, key.Pin(), pin)
	}
	return pub, nil
}

// bootstrap reads the well-known document and writes config.toml (with
// gateway_urls after gateway_url when it lists several gateways) and
// join-encryption.jwk from it.
func bootstrap(ctx context.Context, opts Options, log *slog.Logger) error {
	base := strings.TrimRight(opts.Server, "/")
	switch {
	case strings.HasPrefix(base, "https://"):
	case strings.HasPrefix(base, "http://") && opts.TrustDocument:
	default:
		return fmt.Errorf("%w: --server %q must be an https:// URL", ErrWellKnown, opts.Server)
	}
	if !opts.TrustDocument && (opts.ServingCAPin == "" || opts.JoinSigningPin == "" || opts.JoinEncryptionPin == "") {
		return fmt.Errorf("%w: --server needs --serving-ca-pin, --join-signing-pin and --join-encryption-pin in this build", ErrWellKnown)
	}
	doc, err := fetchDocument(ctx, opts, base)
	if err != nil {
		return err
	}
	existing, loadErr := config.Load(opts.ConfigPath)
	if loadErr != nil {
		existing = nil
	}
	gateways, err := gatewayURLs(doc, existing != nil && existing.DevInsecureH2C)
	if err != nil {
		return err
	}
	values := map[string]string{
		"gateway_url":         doc.Gateway.URL,
		"gateway_server_name": doc.Gateway.ServerName,
		"serving_ca_spki_pin": doc.Gateway.ServingCASPKIPin,
		"join_signing_pin":    doc.Join.SigningPin,
		"join_encryption_pin": doc.Join.EncryptionPin,
	}
	order := []string{"gateway_url", "gateway_urls", "gateway_server_name", "serving_ca_spki_pin", "join_signing_pin", "join_signing_key", "join_encryption_pin", "data_dir", "node_id"}
	if doc.Join.SigningKey != "" {
		if _, err := identity.ParsePinnedKey(doc.Join.SigningKey, doc.Join.SigningPin); err != nil {
			return fmt.Errorf("%w: %w", ErrWellKnown, err)
		}
		values["join_signing_key"] = doc.Join.SigningKey
	}
	if existing == nil || existing.DataDir == "" {
		dataDir := opts.DataDir
		if dataDir == "" {
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(opts.ConfigPath), "data"))
			if err != nil {
				return err
			}
			dataDir = abs
		}
		values["data_dir"] = dataDir
		values["node_id"] = ""
	}
	if err := os.MkdirAll(filepath.Dir(opts.ConfigPath), 0o755); err != nil {
		return err
	}
	encoded := map[string]string{}
	for key, v := range values {
		encoded[key] = config.Quote(v)
	}
	// gateway_urls only with several gateways; one a person wrote before
	// is emptied when the document lists one.
	if len(gateways) > 0 || (existing != nil && len(existing.GatewayURLs) > 0) {
		encoded["gateway_urls"] = config.QuoteArray(gateways)
	}
	if err := config.SetEncoded(opts.ConfigPath, encoded, order); err != nil {
		return err
	}
	jwkPath := filepath.Join(filepath.Dir(opts.ConfigPath), config.JWKFileName)
	if err := config.WriteFileAtomic(jwkPath, append([]byte(strings.TrimSpace(string(doc.Join.EncryptionJWK))), '\n'), 0o644); err != nil {
		return err
	}
	log.Info("join.bootstrap", "server", base, "gateway", doc.Gateway.URL, "gateways", max(len(gateways), 1), "trust_domain", doc.TrustDomain)
	return nil
}

// fetchDocument GETs base's well-known document and checks it: every
// field bootstrap writes present, each pin the one given on the command
// line (when given), the encryption JWK the one its pin names.
func fetchDocument(ctx context.Context, opts Options, base string) (*Document, error) {
	client := opts.HTTP
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+WellKnownPath, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWellKnown, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWellKnown, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWellKnown, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s: %s", ErrWellKnown, base+WellKnownPath, resp.Status)
	}
	doc := &Document{}
	if err := json.Unmarshal(body, doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWellKnown, err)
	}
	if doc.Gateway.URL == "" || doc.Gateway.ServingCASPKIPin == "" || doc.Join.SigningPin == "" || doc.Join.EncryptionPin == "" || len(doc.Join.EncryptionJWK) == 0 {
		return nil, fmt.Errorf("%w: the document lacks the gateway or the join pins", ErrWellKnown)
	}
	for _, p := range []struct{ flag, doc, name string }{
		{opts.ServingCAPin, doc.Gateway.ServingCASPKIPin, "serving CA"},
		{opts.JoinSigningPin, doc.Join.SigningPin, "join-signing"},
		{opts.JoinEncryptionPin, doc.Join.EncryptionPin, "join-encryption"},
	} {
		if p.flag != "" && p.flag != p.doc {
			return nil, fmt.Errorf("%w: the document's %s pin %s is not the pinned %s", ErrPin, p.name, p.doc, p.flag)
		}
	}
	if _, err := parseJWK(doc.Join.EncryptionJWK, doc.Join.EncryptionPin); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWellKnown, err)
	}
	return doc, nil
}

// EncodeSPKI is the base64 form of a key for join_signing_key.
func EncodeSPKI(k *pki.PublicKey) string { return base64.StdEncoding.EncodeToString(k.SPKI()) }
