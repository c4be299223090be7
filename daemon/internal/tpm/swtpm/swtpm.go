// Package swtpm runs a software TPM (swtpm, TPM 2.0) for one client on
// loopback, for tests and for the fakehw build: started on a copy of a
// committed state, always stopped orderly.
//
// The data channel listens on a port picked free by the kernel; the control
// channel is a listener this process binds on the next port and passes to
// swtpm as a file descriptor, so parallel tests never collide. Stop sends
// TPM2_Shutdown(CLEAR) on the data channel and CMD_SHUTDOWN on the control
// channel (what `swtpm_ioctl -s` sends), then waits for the process: an
// unorderly stop counts toward the TPM's dictionary-attack lockout.
package swtpm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const (
	cmdShutdown          = 3 // CMD_SHUTDOWN of swtpm's tpm_ioctl.h
	cmdGetTPMEstablished = 4 // CMD_GET_TPMESTABLISHED, a harmless probe
	patience             = 5 * time.Second
)

// tpm2ShutdownClear is TPM2_Shutdown(TPM_SU_CLEAR) as a raw command.
var tpm2ShutdownClear = []byte{0x80, 0x01, 0, 0, 0, 12, 0, 0, 0x01, 0x45, 0, 0}

// ErrNotInstalled says swtpm is not on PATH.
var ErrNotInstalled = errors.New("swtpm is not installed")

// Swtpm is a running swtpm.
type Swtpm struct {
	cmd      *exec.Cmd
	port     int
	stateDir string
	temp     string
	exited   chan error
	stderr   strings.Builder
}

// Available reports whether swtpm is on PATH.
func Available() bool {
	_, err := exec.LookPath("swtpm")
	return err == nil
}

// StartOnCopy starts swtpm on a copy of the state file permall
// (tpm2-00.permall) in a temporary directory, removed by Stop.
func StartOnCopy(permall string) (*Swtpm, error) {
	dir, err := os.MkdirTemp("", "swtpm-")
	if err != nil {
		return nil, err
	}
	state, err := os.ReadFile(permall)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tpm2-00.permall"), state, 0o600)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("copying the TPM state: %w", err)
	}
	s, err := Start(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.temp = dir
	return s, nil
}

// Start starts swtpm on the state directory dir (swtpm rewrites it; an
// empty directory makes a new TPM with random seeds).
func Start(dir string) (*Swtpm, error) {
	if !Available() {
		return nil, ErrNotInstalled
	}
	var last error
	for range 8 {
		s, err := start(dir)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

// ports returns a free data port and a bound listener on the port after it
// (the swtpm TCTI finds the control channel at data port + 1). It tries
// pairs below the kernel's ephemeral range first: Linux hands even ports to
// bind(0) and odd ones to connect(), so on a machine busy with outgoing
// connections (a fleet of agents on loopback) the port after a kernel-picked
// one is often taken; below the range only listeners compete.
func ports() (int, *net.TCPListener, error) {
	for attempt := range 128 {
		port := 0
		if attempt < 64 {
			port = pairLow + 2*rand.IntN((pairHigh-pairLow)/2)
		}
		data, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			continue
		}
		port = data.Addr().(*net.TCPAddr).Port
		data.Close()
		ctrl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port + 1})
		if err == nil {
			return port, ctrl, nil
		}
	}
	return 0, nil, errors.New("no free pair of consecutive ports")
}

// The range ports tries first: below Linux's default ephemeral range
// (32768-60999).
const (
	pairLow  = 20000
	pairHigh = 32000
)

func start(dir string) (*Swtpm, error) {
	port, ctrl, err := ports()
	if err != nil {
		return nil, err
	}
	file, err := ctrl.File()
	ctrl.Close()
	if err != nil {
		return nil, err
	}
	defer file.Close()
	s := &Swtpm{port: port, stateDir: dir, exited: make(chan error, 1)}
	s.cmd = exec.Command("swtpm", "socket", "--tpm2",
		"--tpmstate", "dir="+dir,
		"--server", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", port),
		"--ctrl", "type=tcp,fd=3",
		"--flags", "not-need-init,startup-clear")
	s.cmd.ExtraFiles = []*os.File{file}
	s.cmd.Stderr = &s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting swtpm: %w", err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(patience)
	for {
		select {
		case err := <-s.exited:
			return nil, fmt.Errorf("swtpm exited at start (%v): %s", err, strings.TrimSpace(s.stderr.String()))
		default:
		}
		if control(port+1, cmdGetTPMEstablished, 500*time.Millisecond) == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, errors.New("swtpm does not answer on its control channel")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Addr is the data channel's address ("127.0.0.1:<port>").
func (s *Swtpm) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// StateDir is the state directory.
func (s *Swtpm) StateDir() string { return s.stateDir }

// Pid is swtpm's process id.
func (s *Swtpm) Pid() int { return s.cmd.Process.Pid }

// Stop stops swtpm orderly (any client must have disconnected) and removes
// a temporary state directory. It is safe to call more than once.
func (s *Swtpm) Stop() error {
	if s.cmd == nil {
		return nil
	}
	rc, shutdownErr := tpmCommand(s.port, tpm2ShutdownClear)
	ctrlErr := control(s.port+1, cmdShutdown, patience)
	var err error
	select {
	case <-s.exited:
	case <-time.After(patience):
		s.cmd.Process.Kill()
		<-s.exited
		err = errors.New("swtpm did not exit; killed")
	}
	s.cmd = nil
	if s.temp != "" {
		os.RemoveAll(s.temp)
	}
	switch {
	case err != nil:
		return err
	case shutdownErr != nil:
		return fmt.Errorf("TPM2_Shutdown: %w", shutdownErr)
	case rc != 0:
		return fmt.Errorf("TPM2_Shutdown: response code %#x", rc)
	default:
		return ctrlErr
	}
}

func (s *Swtpm) kill() {
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

func dial(port int, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), timeout)
	if err != nil {
		return nil, err
	}
	return c, c.SetDeadline(time.Now().Add(timeout))
}

func control(port int, command uint32, timeout time.Duration) error {
	c, err := dial(port, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := binary.Write(c, binary.BigEndian, command); err != nil {
		return err
	}
	var result uint32
	if err := binary.Read(c, binary.BigEndian, &result); err != nil {
		return err
	}
	if result != 0 {
		return fmt.Errorf("control command %d: result %#x", command, result)
	}
	return nil
}

func tpmCommand(port int, command []byte) (uint32, error) {
	c, err := dial(port, patience)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Write(command); err != nil {
		return 0, err
	}
	header := make([]byte, 10)
	if _, err := io.ReadFull(c, header); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(header[6:]), nil
}
