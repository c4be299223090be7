// bcd join: the token from standard input or --token-file (removed after a
// successful join), or the TPM (--attestor tpm, no token), optionally the
// well-known document (--server).

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"bcd/internal/agent"
	"bcd/internal/config"
	"bcd/internal/join"
)

const joinUsage = `usage: bcd join [--config PATH] [--token-file FILE | --attestor tpm] [--server URL] [pins]

Joins the fleet: seals the join token to the pinned join-encryption key,
bound to a fresh node key's CSR, calls the JoinService over pinned TLS,
verifies the signed JoinResponse, and writes node.key, node.crt and
join-response.json into the data dir and node_id into config.toml.
The token is read from standard input unless --token-file names a file
(removed after a successful join). It is never printed or logged.
With --attestor tpm there is no token: bcd proves its TPM in two rounds
(the EK and its certificate, a new AK, the credential, a quote of PCRs
0-7) and makes the node key in the TPM, certified by the AK; node.key
then only names that key (a BCD TPM NODE KEY record).
A node that has joined says "already joined" and exits 0.

Flags:
  --config PATH            config.toml (default /etc/bcd/config.toml)
  --token-file FILE        read the token from FILE instead of standard input
  --attestor NAME          token (default) or tpm
  --server URL             read the gateway and the pins from URL's
                           /.well-known/better-compute and write config.toml and
                           join-encryption.jwk (fakehw builds take the pins on
                           trust and accept http://)
  --data-dir DIR           the data dir of a config.toml that --server writes
                           (default: data/ next to it)
  --serving-ca-pin PIN     with --server: the pins the document must carry
  --join-signing-pin PIN   (required in builds without fakehw)
  --join-encryption-pin PIN
`

func runJoin(args []string, e env) int {
	fs := flag.NewFlagSet("join", flag.ContinueOnError)
	configPath := fs.String("config", config.DefaultPath, "")
	tokenFile := fs.String("token-file", "", "")
	server := fs.String("server", "", "")
	dataDir := fs.String("data-dir", "", "")
	servingPin := fs.String("serving-ca-pin", "", "")
	signingPin := fs.String("join-signing-pin", "", "")
	encryptionPin := fs.String("join-encryption-pin", "", "")
	attestor := fs.String("attestor", join.AttestorToken, "")
	if code, ok := parse(fs, args, joinUsage, e); !ok {
		return code
	}
	tpmJoin := *attestor == join.AttestorTPM
	switch {
	case *attestor != join.AttestorToken && !tpmJoin:
		fmt.Fprintf(e.stderr, "bcd join: --attestor must be token or tpm, not %q\n\n%s", *attestor, joinUsage)
		return 2
	case tpmJoin && *tokenFile != "":
		fmt.Fprintf(e.stderr, "bcd join: --attestor tpm takes no token (--token-file)\n\n%s", joinUsage)
		return 2
	}
	if r, ok := join.AlreadyJoined(*configPath); ok {
		fmt.Fprintf(e.stdout, "already joined as %s\n", r.NodeID)
		return 0
	}
	var token string
	if !tpmJoin {
		var err error
		if token, err = readToken(*tokenFile, e.stdin); err != nil {
			return fail(e, "join", err)
		}
	}
	dataDirFor := *dataDir
	if c, err := config.Load(*configPath); err == nil {
		dataDirFor = c.DataDir
	} else if dataDirFor == "" && *server == "" {
		return fail(e, "join", err)
	}
	machineData := machineDir(dataDirFor, *configPath)
	m, err := newMachine(machineData, e.getenv, "")
	if err != nil {
		return fail(e, "join", err)
	}
	log := logger(e)
	k := readKnobs(e.getenv, log)
	device := newTPMDevice(machineData, e.getenv, log)
	defer device.Close()
	ctx := e.ctx
	r, err := join.Join(ctx, join.Options{
		ConfigPath: *configPath, Token: token, Server: *server, TrustDocument: fakehwBuild,
		ServingCAPin: *servingPin, JoinSigningPin: *signingPin, JoinEncryptionPin: *encryptionPin,
		DataDir: *dataDir, Machine: m, Version: version, Capabilities: agent.CapabilitiesOf(m),
		AllowH2C: fakehwBuild, Log: log,
		Attestor: *attestor, TPM: device.Open, TPMOtherCSRKey: k.tpmOtherCSRKey,
	})
	if errors.Is(err, join.ErrAlreadyJoined) {
		fmt.Fprintf(e.stdout, "already joined as %s\n", r.NodeID)
		return 0
	}
	if err != nil {
		return fail(e, "join", err)
	}
	if *tokenFile != "" {
		if err := os.Remove(*tokenFile); err != nil {
			fmt.Fprintf(e.stderr, "bcd join: joined, but could not remove the token file: %v\n", err)
		}
	}
	fmt.Fprintf(e.stdout, "joined as %s (data dir %s)\n", r.NodeID, r.DataDir)
	return 0
}

// MaxTokenBytes is the largest join token bcd reads; a larger one is
// refused, never cut.
const MaxTokenBytes = 64 << 10

// readToken reads the token from file, or from stdin when file is "". A
// token larger than MaxTokenBytes is an error: cutting it would send
// another token than the one given.
func readToken(file string, stdin io.Reader) (string, error) {
	from := "standard input"
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("the token file: %w", err)
		}
		defer f.Close()
		stdin, from = f, "the token file"
	}
	if stdin == nil {
		return "", join.ErrNoToken
	}
	data, err := io.ReadAll(io.LimitReader(stdin, MaxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the token from %s: %w", from, err)
	}
	if len(data) > MaxTokenBytes {
		return "", fmt.Errorf("the token on %s is larger than %d bytes; nothing was sent", from, MaxTokenBytes)
	}
	return string(data), nil
}
