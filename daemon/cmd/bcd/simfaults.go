// bcd sim's faults (docs/daemon.md, "The command line"): a control socket through
// which a chaos run crashes, reboots or wipes the journal of one agent, and
// the power-on spread of a cold start. A fault stops the agent as a crash
// would (its context cancelled: a command it runs is interrupted without a
// result, nothing more is journaled), then, before the agent starts again
// from its data dir, a reboot gives the machine a new boot id (fakehw
// clears /run) and a journal loss deletes the journal. The socket is the
// sim owner's alone (0600, in the data dir); every request is one line,
// "<fault> <agent>", answered "ok" or "error: <why>".

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"bcd/internal/agent"
	"bcd/internal/machine"
)

// A fault the control socket takes.
type simFault string

const (
	faultCrash       simFault = "crash"
	faultReboot      simFault = "reboot"
	faultLoseJournal simFault = "lose-journal"
)

// errFault is the cause an agent's context is cancelled with by a fault.
type errFault struct{ fault simFault }

func (e errFault) Error() string { return "sim fault: " + string(e.fault) }

// maxControlLine bounds one request line.
const maxControlLine = 256

// agents are the running agents' kill switches, by index.
type agents struct {
	mu    sync.Mutex
	kills map[int]context.CancelCauseFunc
}

func (a *agents) set(i int, kill context.CancelCauseFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.kills == nil {
		a.kills = map[int]context.CancelCauseFunc{}
	}
	if kill == nil {
		delete(a.kills, i)
	} else {
		a.kills[i] = kill
	}
}

// fault stops agent i with fault f; an agent not running (not joined yet,
// between two runs) is an error.
func (a *agents) fault(i int, f simFault) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	kill, ok := a.kills[i]
	if !ok {
		return fmt.Errorf("agent %d is not running", i)
	}
	kill(errFault{f})
	delete(a.kills, i)
	return nil
}

// parseFault reads one request line.
func parseFault(line string) (simFault, int, error) {
	name, index, ok := strings.Cut(strings.TrimSpace(line), " ")
	i, err := strconv.Atoi(index)
	if !ok || err != nil || i < 0 {
		return "", 0, errors.New(`a request is "<fault> <agent>"`)
	}
	switch f := simFault(name); f {
	case faultCrash, faultReboot, faultLoseJournal:
		return f, i, nil
	default:
		return "", 0, fmt.Errorf("unknown fault %q (crash, reboot, lose-journal)", name)
	}
}

// serveControl answers fault requests on a unix socket at path until ctx ends.
func (s *sim) serveControl(ctx context.Context, path string) error {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("the control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go s.control(conn)
		}
	}()
	return nil
}

// control answers one connection's requests.
func (s *sim) control(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, maxControlLine)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				fmt.Fprintf(conn, "error: a request line is at most %d bytes\n", maxControlLine)
			}
			return
		}
		f, i, err := parseFault(string(line))
		if err == nil {
			err = s.running.fault(i, f)
		}
		if err != nil {
			fmt.Fprintf(conn, "error: %s\n", err)
			continue
		}
		s.log.Info("sim.fault", "sim", i, "fault", string(f))
		fmt.Fprintln(conn, "ok")
	}
}

// afterFault does what a fault leaves behind once agent i stopped: a new
// boot, or no journal.
func afterFault(f simFault, m machine.Machine, dataDir string) error {
	switch f {
	case faultReboot:
		return m.Reboot()
	case faultLoseJournal:
		return os.Remove(filepath.Join(dataDir, agent.JournalFile))
	}
	return nil
}

// powerOnDelay is agent i's seeded power-on time within spread: the same
// seed and index give the same delay, whatever the other agents are.
func powerOnDelay(seed string, i int, spread time.Duration) time.Duration {
	if spread <= 0 {
		return 0
	}
	h := sha256.Sum256([]byte("bcd-sim/power-on\x00" + seed + "\x00" + strconv.Itoa(i)))
	return time.Duration(binary.BigEndian.Uint64(h[:8]) % uint64(spread))
}
