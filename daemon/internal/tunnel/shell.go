// The console's shell: the node user's shell ($SHELL, else /bin/sh) on a
// real pseudo-terminal (github.com/creack/pty) of the caller's size, in a
// new session with the terminal as its controlling terminal, with a clean,
// small environment (TERM from the caller, HOME, PATH), in the place's
// directory (the fake root in fakehw builds, HOME otherwise).

package tunnel

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// DefaultShell is the shell when $SHELL is not set.
const DefaultShell = "/bin/sh"

// DefaultTerm is TERM when the caller named none.
const DefaultTerm = "dumb"

// ShellPath is the PATH of the shell's environment.
const ShellPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// killGrace is how long a hung-up shell may take to exit before it is killed.
const killGrace = time.Second

// Place is where a machine runs its consoles' shells; a machine that is one
// (fakehw) puts them in its fake root and counts them.
type Place interface {
	// ShellDir is the shell's working directory and HOME.
	ShellDir() string
	// ShellStarted records that a shell is about to start (fakehw counts
	// them, so a test can prove that a refused ticket started none).
	ShellStarted() error
}

// Shell says how consoles start their shell.
type Shell struct {
	// Path is the shell ("" → DefaultShell).
	Path string
	// Dir is its working directory ("" → Home).
	Dir string
	// Home is its HOME.
	Home string
	// Started, when set, runs right before each shell starts; an error
	// starts none.
	Started func() error
}

// ShellFor is the shell of this process's user ($SHELL, else /bin/sh; HOME
// from the environment), in place's directory when there is a place.
func ShellFor(getenv func(string) string, place Place) Shell {
	s := Shell{Path: getenv("SHELL"), Home: getenv("HOME")}
	if s.Home == "" {
		s.Home, _ = os.UserHomeDir()
	}
	if place != nil {
		s.Dir, s.Home, s.Started = place.ShellDir(), place.ShellDir(), place.ShellStarted
	}
	return s
}

// shellProc is one running shell and its terminal.
type shellProc struct {
	cmd    *exec.Cmd
	pty    *os.File
	exited chan struct{}
	state  *os.ProcessState
}

// start starts the shell on a new pseudo-terminal of size.
func (s Shell) start(term string, rows, cols uint16) (*shellProc, error) {
	path := s.Path
	if path == "" {
		path = DefaultShell
	}
	if term == "" {
		term = DefaultTerm
	}
	dir := s.Dir
	if dir == "" {
		dir = s.Home
	}
	if s.Started != nil {
		if err := s.Started(); err != nil {
			return nil, refuseWith(CodeShell, err, "recording the shell")
		}
	}
	cmd := exec.Command(path)
	cmd.Args = []string{filepath.Base(path)}
	cmd.Dir = dir
	cmd.Env = []string{"TERM=" + term, "HOME=" + s.Home, "PATH=" + ShellPath}
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		return nil, refuseWith(CodeShell, err, "starting "+path)
	}
	p := &shellProc{cmd: cmd, pty: f, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	return p, nil
}

// resize sets the terminal's size (the shell gets SIGWINCH).
func (p *shellProc) resize(rows, cols uint16) error {
	return pty.Setsize(p.pty, &pty.Winsize{Rows: rows, Cols: cols})
}

// exitCode is the shell's exit status, 128 + the signal when a signal
// ended it. It is valid once exited is closed.
func (p *shellProc) exitCode() int32 {
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(p.state.ExitCode())
}

// hangUp ends the shell as a terminal hang-up does: SIGHUP to its process
// group, then SIGKILL when it is still there after killGrace.
func (p *shellProc) hangUp() {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGHUP)
	select {
	case <-p.exited:
	case <-time.After(killGrace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.exited
	}
}
