// The fake machine's consoles: their shells run in the fake root (also
// their HOME), and each start is counted in var/lib/fakehw/shells, fsynced
// before the shell starts, so a test can prove that a refused exec ticket
// started no shell.

package fakehw

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"bcd/internal/config"
)

// ShellDir is the fake root: the consoles' working directory and HOME.
func (m *Machine) ShellDir() string { return m.root }

// ShellsPath is the counter file of the shells consoles started.
func (m *Machine) ShellsPath() string {
	return filepath.Join(m.root, "var", "lib", "fakehw", "shells")
}

// ShellStarted increments the shell counter, fsynced.
func (m *Machine) ShellStarted() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.ShellsStarted()
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(m.ShellsPath(), []byte(strconv.Itoa(n+1)+"\n"), 0o644)
}

// ShellsStarted reads the shell counter (0 when no shell ever started).
func (m *Machine) ShellsStarted() (int, error) {
	data, err := os.ReadFile(m.ShellsPath())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}
