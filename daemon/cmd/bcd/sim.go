// bcd sim: N node agents in one process, each a distinct fakehw machine
// (seed S+i) with its own identity under data_dir/sim/<i>, all joined with
// one token read from standard input (N uses).

package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"bcd/internal/agent"
	"bcd/internal/config"
	"bcd/internal/join"
)

const simUsage = `usage: bcd sim --config PATH --nodes N [--seed S] [--token-file FILE]

Runs N node agents in one process (fakehw builds only): agent i is a fakehw
machine with seed S+i (S+"-"+i when S is not a number) and its own identity,
journal, configuration and status socket under data_dir/sim/<i>. Agents that
have not joined yet join with one token read from standard input (a token
with N uses); the token is never printed. Then every agent runs its session
until SIGTERM or SIGINT.

Flags:
  --config PATH      the base config.toml (gateway, pins, data_dir)
  --nodes N          how many agents (1 to 1000)
  --seed S           the first seed (default BCD_FAKEHW_SEED, else 41)
  --token-file FILE  read the token from FILE instead of standard input
`

func runSim(args []string, e env) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	configPath := fs.String("config", config.DefaultPath, "")
	nodes := fs.Int("nodes", 0, "")
	seed := fs.String("seed", "", "")
	tokenFile := fs.String("token-file", "", "")
	if code, ok := parse(fs, args, simUsage, e); !ok {
		return code
	}
	if !fakehwBuild {
		return fail(e, "sim", errors.New("bcd sim needs a fakehw build (go build -tags nonvml,fakehw)"))
	}
	if *nodes < 1 || *nodes > 1000 {
		fmt.Fprintf(e.stderr, "bcd sim: --nodes must be 1 to 1000\n\n%s", simUsage)
		return 2
	}
	if *seed == "" {
		*seed = defaultSimSeed(e.getenv)
	}
	base, err := config.Load(*configPath)
	if err != nil {
		return fail(e, "sim", err)
	}
	jwk, err := os.ReadFile(base.JWKPath())
	if err != nil {
		return fail(e, "sim", fmt.Errorf("the join-encryption key: %w", err))
	}
	baseText, err := os.ReadFile(*configPath)
	if err != nil {
		return fail(e, "sim", err)
	}
	log := logger(e)
	k := readKnobs(e.getenv, log)
	var token string
	tokenRead := false
	agents := make([]*agent.Agent, 0, *nodes)
	defer func() {
		for _, a := range agents {
			a.Close()
		}
	}()
	ctx := e.ctx
	for i := 0; i < *nodes; i++ {
		dir := filepath.Join(base.DataDir, "sim", strconv.Itoa(i))
		path, err := simConfig(dir, baseText, jwk)
		if err != nil {
			return fail(e, "sim", err)
		}
		m, err := newMachine(dir, e.getenv, simSeed(*seed, i))
		if err != nil {
			return fail(e, "sim", err)
		}
		if _, joined := join.AlreadyJoined(path); !joined {
			if !tokenRead {
				if token, err = readToken(*tokenFile, e.stdin); err != nil {
					return fail(e, "sim", err)
				}
				tokenRead = true
			}
			r, err := join.Join(ctx, join.Options{ConfigPath: path, Token: token, Machine: m, Version: version,
				Capabilities: agent.Capabilities, AllowH2C: true, Log: log.With("sim", i)})
			if err != nil && !errors.Is(err, join.ErrAlreadyJoined) {
				return fail(e, "sim", fmt.Errorf("agent %d: %w", i, err))
			}
			fmt.Fprintf(e.stdout, "agent %d joined as %s\n", i, r.NodeID)
		}
		c, err := config.Load(path)
		if err != nil {
			return fail(e, "sim", err)
		}
		vps, err := newVPS(c, c.DataDir, m, e.getenv, log.With("sim", i))
		if err != nil {
			return fail(e, "sim", fmt.Errorf("agent %d: %w", i, err))
		}
		a, err := agent.New(agent.Options{Config: c, Machine: m, Version: version, AllowH2C: true, BackoffCap: k.backoffCap,
			RenewAfter: k.renewAfter, Log: log.With("sim", i), VPS: vps})
		if err != nil {
			return fail(e, "sim", fmt.Errorf("agent %d: %w", i, err))
		}
		agents = append(agents, a)
	}
	fmt.Fprintf(e.stdout, "%d agent(s) running\n", len(agents))
	var wg sync.WaitGroup
	codes := make([]int, len(agents))
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := a.Run(ctx)
			if err != nil {
				log.Error("sim.agent_failed", "sim", i, "err", err)
				code = agent.ExitError
			}
			codes[i] = code
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != 0 {
			return c
		}
	}
	return 0
}

// simSeed is agent i's seed: S+i for a numeric S, else S-i.
func simSeed(s string, i int) string {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(n+int64(i), 10)
	}
	return s + "-" + strconv.Itoa(i)
}

// simConfig writes an agent's config.toml (the base one with its own data
// dir) and join-encryption.jwk once, and returns the config's path.
func simConfig(dir string, baseText, jwk []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, config.FileName)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := config.WriteFileAtomic(filepath.Join(dir, config.JWKFileName), jwk, 0o644); err != nil {
		return "", err
	}
	tmp := path + ".base"
	if err := config.WriteFileAtomic(tmp, baseText, 0o644); err != nil {
		return "", err
	}
	if err := config.Set(tmp, map[string]string{"data_dir": dir, "node_id": ""}, []string{"data_dir", "node_id"}); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}
