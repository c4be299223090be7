// bcd join: the token from standard input or --token-file (removed after a
// successful join), optionally the well-known document (--server).

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

const joinUsage = `usage: bcd join [--config PATH] [--token-file FILE] [--server URL] [pins]

Joins the fleet: seals the join token to the pinned join-encryption key,
bound to a fresh node key's CSR, calls the JoinService over pinned TLS,
verifies the signed JoinResponse, and writes node.key, node.crt and
join-response.json into the data dir and node_id into config.toml.
The token is read from standard input unless --token-file names a file
(removed after a successful join). It is never printed or logged.
A node that has joined says "already joined" and exits 0.

Flags:
  --config PATH            config.toml (default /etc/bcd/config.toml)
  --token-file FILE        read the token from FILE instead of standard input
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
	if code, ok := parse(fs, args, joinUsage, e); !ok {
		return code
	}
	if r, ok := join.AlreadyJoined(*configPath); ok {
		fmt.Fprintf(e.stdout, "already joined as %s\n", r.NodeID)
		return 0
	}
	token, err := readToken(*tokenFile, e.stdin)
	if err != nil {
		return fail(e, "join", err)
	}
	dataDirFor := *dataDir
	if c, err := config.Load(*configPath); err == nil {
		dataDirFor = c.DataDir
	} else if dataDirFor == "" && *server == "" {
		return fail(e, "join", err)
	}
	m, err := newMachine(machineDir(dataDirFor, *configPath), e.getenv, "")
	if err != nil {
		return fail(e, "join", err)
	}
	ctx := e.ctx
	r, err := join.Join(ctx, join.Options{
		ConfigPath: *configPath, Token: token, Server: *server, TrustDocument: fakehwBuild,
		ServingCAPin: *servingPin, JoinSigningPin: *signingPin, JoinEncryptionPin: *encryptionPin,
		DataDir: *dataDir, Machine: m, Version: version, Capabilities: agent.Capabilities,
		AllowH2C: fakehwBuild, Log: logger(e),
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

// readToken reads the token from file, or from stdin when file is "".
func readToken(file string, stdin io.Reader) (string, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("the token file: %w", err)
		}
		return string(data), nil
	}
	if stdin == nil {
		return "", join.ErrNoToken
	}
	data, err := io.ReadAll(io.LimitReader(stdin, 64<<10))
	if err != nil {
		return "", fmt.Errorf("reading the token from standard input: %w", err)
	}
	return string(data), nil
}
