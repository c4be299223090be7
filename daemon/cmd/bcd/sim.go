// bcd sim: up to 10,000 node agents in one process, each a distinct fakehw
// machine (seed S+i) with its own identity under data_dir/sim/<i>, all
// joined with one token read from standard input (N uses), a bounded number
// of joins at a time, each retried on its own on a transient failure.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"bcd/internal/agent"
	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/join"
	"bcd/internal/machine"
	"bcd/internal/retry"
)

const simUsage = `usage: bcd sim --config PATH --nodes N [--seed S] [--token-file FILE] [--join-concurrency C]
               [--power-on-spread D] [--control SOCKET]
       bcd sim --crypto-floor

Runs N node agents in one process (fakehw builds only): agent i is a fakehw
machine with seed S+i (S+"-"+i when S is not a number) and its own identity,
journal, configuration and status socket under data_dir/sim/<i>; with several
gateways configured (gateway_urls), agent i starts on gateway i mod n and
fails over in the list's order from there. Agents that
have not joined yet join with one token read from standard input (a token
with N uses); the token is never printed. At most C joins are under way at a
time; a join that fails for a transient reason (a transport error,
Unavailable, ResourceExhausted, a deadline) is logged (join.retry) and tried
again with the same request after a full-jitter wait (the gateway's
retry-after hint honoured) while the other agents go on; a refused join is
logged (sim.join_failed) and that agent does not run. Each agent runs its
session as soon as it has joined, until SIGTERM or SIGINT. The exit status
is 1 when an agent could not join (a refusal), else the first non-zero status of an agent.
With --power-on-spread D, agent i powers on (joins or starts) after a
delay drawn from the seed and i within D, as a fleet cold start does.
With --control SOCKET, bcd sim answers fault requests on that unix socket
(0600), one line each, "crash <i>", "reboot <i>" or "lose-journal <i>",
with "ok" or "error: <why>": agent i stops as a crash would, and starts
again from its data dir (after a reboot with a new boot id, after a
journal loss without its journal). An agent that ends for a reboot
(node.reboot) starts again the same way, as its supervisor would start bcd.
Every agent holds about 4 descriptors (the session's connection, the
journal, the status socket and its listener): keep N x 4 under the
open-file limit (ulimit -n), or run several bcd sim processes. Unless GOGC
is set, bcd sim runs Go's collector at GOGC=200 (a larger heap for a fifth
less CPU with thousands of agents).

Flags:
  --config PATH         the base config.toml (gateway, pins, data_dir)
  --nodes N             how many agents (1 to 10000)
  --seed S              the first seed (default BCD_FAKEHW_SEED, else 41)
  --token-file FILE     read the token from FILE instead of standard input
  --join-concurrency C  joins under way at once (1 to 1000, default 64)
  --power-on-spread D   power the agents on at seeded times within D (e.g. 30s)
  --control SOCKET      take fault requests on this unix socket
  --crypto-floor        print what a P-256 sign, verify, key generation and
                        ECDH, an X25519 exchange and an Ed25519 sign and
                        verify cost here (ns, JSON) and exit
`

// MaxSimNodes is the most agents one bcd sim runs.
const MaxSimNodes = 10_000

// SimGCPercent is the GOGC bcd sim runs at when GOGC is not set. Its heap
// is thousands of agents' long-lived state and it allocates fast while
// they join: at Go's default (100) the collector and its assists took about
// a quarter of its CPU. At 200, bcd sim used a fifth less CPU for a fifth
// more memory (cargo xtask bench scale, 10,000 agents); at 400, no less CPU
// than at 200 for a third more memory again.
const SimGCPercent = 200

// DefaultJoinConcurrency is how many joins bcd sim has under way at once.
const DefaultJoinConcurrency = 64

// simRestartPause is how long an agent whose restart failed waits before
// the next (systemd's RestartSec, as a real node's supervisor waits).
const simRestartPause = time.Second

// simJoinRetry is a sim agent's retry policy: full jitter from 250 ms to a
// 5 s cap, with no budget (an agent keeps trying until bcd sim stops).
var simJoinRetry = retry.Policy{Base: 250 * time.Millisecond, Cap: 5 * time.Second}

func runSim(args []string, e env) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	configPath := fs.String("config", config.DefaultPath, "")
	nodes := fs.Int("nodes", 0, "")
	seed := fs.String("seed", "", "")
	tokenFile := fs.String("token-file", "", "")
	concurrency := fs.Int("join-concurrency", DefaultJoinConcurrency, "")
	floor := fs.Bool("crypto-floor", false, "")
	spread := fs.Duration("power-on-spread", 0, "")
	control := fs.String("control", "", "")
	if code, ok := parse(fs, args, simUsage, e); !ok {
		return code
	}
	if *floor {
		if err := cryptoFloor(e.stdout); err != nil {
			return fail(e, "sim", err)
		}
		return 0
	}
	if !fakehwBuild {
		return fail(e, "sim", errors.New("bcd sim needs a fakehw build (go build -tags nonvml,fakehw)"))
	}
	if *nodes < 1 || *nodes > MaxSimNodes {
		fmt.Fprintf(e.stderr, "bcd sim: --nodes must be 1 to %d\n\n%s", MaxSimNodes, simUsage)
		return 2
	}
	if *concurrency < 1 || *concurrency > 1000 {
		fmt.Fprintf(e.stderr, "bcd sim: --join-concurrency must be 1 to 1000\n\n%s", simUsage)
		return 2
	}
	if *spread < 0 || *spread > time.Hour {
		fmt.Fprintf(e.stderr, "bcd sim: --power-on-spread must be 0 to 1h\n\n%s", simUsage)
		return 2
	}
	if *seed == "" {
		*seed = defaultSimSeed(e.getenv)
	}
	if e.getenv("GOGC") == "" {
		debug.SetGCPercent(SimGCPercent)
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
	s := &sim{e: e, log: logger(e), seed: *seed, baseText: baseText, jwk: jwk, gateways: base.Gateways(),
		slots: make(chan struct{}, *concurrency), spread: *spread}
	if *control != "" {
		if err := s.serveControl(e.ctx, *control); err != nil {
			return fail(e, "sim", err)
		}
	}
	s.knobs = readKnobs(e.getenv, s.log)
	dirs := make([]string, *nodes)
	needToken := false
	for i := range dirs {
		dirs[i] = filepath.Join(base.DataDir, "sim", strconv.Itoa(i))
		if _, joined := join.AlreadyJoined(filepath.Join(dirs[i], config.FileName)); !joined {
			needToken = true
		}
	}
	if needToken {
		if s.token, err = readToken(*tokenFile, e.stdin); err != nil {
			return fail(e, "sim", err)
		}
	}
	var wg sync.WaitGroup
	codes := make([]int, *nodes)
	for i, dir := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.agent(i, dir)
		}()
	}
	wg.Wait()
	fmt.Fprintf(e.stdout, "%d agent(s) ran, %d join(s) failed\n", s.ran.Load(), s.refused.Load())
	for _, c := range codes {
		if c != 0 {
			return c
		}
	}
	return 0
}

// sim is what the agents of one bcd sim share.
type sim struct {
	e             env
	log           *slog.Logger
	knobs         knobs
	seed, token   string
	baseText, jwk []byte
	gateways      []string      // the base's gateway list
	slots         chan struct{} // one per join (or setup) under way
	spread        time.Duration // the power-on spread
	running       agents        // the running agents, for the control socket
	ran, refused  atomic.Int64
}

// agent powers on (after its spread delay), sets up, joins (when it has
// not) and runs agent i until the sim stops or it is revoked, starting it
// again after each fault and each reboot, and returns its exit status.
func (s *sim) agent(i int, dir string) int {
	log, ctx := s.log.With("sim", i), s.e.ctx
	if delay := powerOnDelay(s.seed, i, s.spread); delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return 0
		}
	}
	s.slots <- struct{}{}
	r, m, err := s.setup(i, dir, log)
	<-s.slots
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		log.Error("sim.join_failed", "err", err)
		fmt.Fprintf(s.e.stderr, "bcd sim: agent %d: %s\n", i, strings.ReplaceAll(err.Error(), "\n", " "))
		s.refused.Add(1)
		return 1
	}
	s.ran.Add(1)
	identity := r.Identity
	for life := 1; ; life++ {
		run, kill := context.WithCancelCause(ctx)
		s.running.set(i, kill)
		code, err := s.runAgent(run, r.Config, m, identity, log)
		s.running.set(i, nil)
		var f errFault
		faulted := errors.As(context.Cause(run), &f)
		kill(nil)
		switch {
		case ctx.Err() != nil:
			return 0
		case err != nil && !faulted && life == 1:
			log.Error("sim.agent_failed", "err", err)
			return agent.ExitError
		case code == agent.ExitRevoked:
			return code
		case err != nil && !faulted:
			// A later life that failed: its supervisor starts it again
			// after a pause, as systemd's Restart=always does.
			log.Warn("sim.agent_failed", "err", err, "life", life, "again_in", simRestartPause.String())
			select {
			case <-time.After(simRestartPause):
			case <-ctx.Done():
				return 0
			}
		}
		// A fault, or the end of a self-terminating command (a reboot): the
		// agent starts again as its supervisor would start bcd, a new
		// process that reads its identity from the data dir and its machine anew.
		if faulted {
			if err := afterFault(f.fault, m, r.Config.DataDir); err != nil {
				log.Error("sim.fault_failed", "fault", string(f.fault), "err", err)
				return agent.ExitError
			}
		}
		if m, err = newMachine(dir, s.e.getenv, simSeed(s.seed, i)); err != nil {
			log.Error("sim.agent_failed", "err", err)
			return agent.ExitError
		}
		identity = nil
	}
}

// runAgent runs one life of an agent until ctx ends or the agent does.
func (s *sim) runAgent(ctx context.Context, c *config.Config, m machine.Machine, id *identity.Identity, log *slog.Logger) (int, error) {
	vps, err := newVPS(c, c.DataDir, m, s.e.getenv, log)
	if err != nil {
		return agent.ExitError, err
	}
	a, err := agent.New(agent.Options{Config: c, Machine: m, Version: version, AllowH2C: true,
		BackoffCap: s.knobs.backoffCap, RenewAfter: s.knobs.renewAfter, Log: log, VPS: vps, Identity: id})
	if err != nil {
		return agent.ExitError, err
	}
	return a.Run(ctx)
}

// setup writes agent i's configuration and machine and joins it when it
// has not joined, retrying transient failures until the sim stops. Its
// result carries the agent's configuration and the identity it joined
// with (nil when the agent had joined before: the agent reads its data
// dir's).
func (s *sim) setup(i int, dir string, log *slog.Logger) (*join.Result, machine.Machine, error) {
	path, err := simConfig(dir, i, s.gateways, s.baseText, s.jwk)
	if err != nil {
		return nil, nil, err
	}
	m, err := newMachine(dir, s.e.getenv, simSeed(s.seed, i))
	if err != nil {
		return nil, nil, err
	}
	policy := simJoinRetry
	r, err := join.Join(s.e.ctx, join.Options{ConfigPath: path, Token: s.token, Machine: m, Version: version,
		Capabilities: agent.CapabilitiesOf(m), AllowH2C: true, Log: log, Retry: &policy})
	switch {
	case errors.Is(err, join.ErrAlreadyJoined):
		return r, m, nil
	case err != nil:
		return nil, nil, err
	}
	fmt.Fprintf(s.e.stdout, "agent %d joined as %s\n", i, r.NodeID)
	return r, m, nil
}

// simSeed is agent i's seed: S+i for a numeric S, else S-i.
func simSeed(s string, i int) string {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(n+int64(i), 10)
	}
	return s + "-" + strconv.Itoa(i)
}

// simConfig writes agent i's config.toml (the base one with its own data
// dir and, with several gateways, the base's list turned so that agent i
// starts on gateway i mod n: the fleet is spread over the gateways, each
// agent failing over in the same order after its own; every other key
// kept) and join-encryption.jwk once, and returns the config's path.
func simConfig(dir string, i int, gateways []string, baseText, jwk []byte) (string, error) {
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
	// config.toml comes last: that it exists says the agent's files do.
	values := map[string]string{"data_dir": config.Quote(dir), "node_id": config.Quote("")}
	order := []string{"data_dir", "node_id"}
	if n := len(gateways); n > 1 {
		turned := append(append([]string{}, gateways[i%n:]...), gateways[:i%n]...)
		values["gateway_url"], values["gateway_urls"] = config.Quote(turned[0]), config.QuoteArray(turned)
		order = append(order, "gateway_url", "gateway_urls")
	}
	text := config.UpdateEncoded(baseText, values, order)
	return path, config.WriteFileAtomic(path, text, 0o644)
}
