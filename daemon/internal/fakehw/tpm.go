// The fake machine's TPM: a swtpm per data dir, on a state copied once from
// the committed testdata/tpm/tpm2-00.permall into data_dir/fakehw-tpm, so
// that its EK certificate is the one the test manufacturer root
// (testdata/tpm/ek-root.der) issued, and a reinstall (the identity files
// removed, the data dir kept) finds the same EK and the same persistent
// keys. swtpm runs only while the TPM is open; closing stops it orderly.

package fakehw

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"bcd/internal/config"
	"bcd/internal/tpm"
	"bcd/internal/tpm/swtpm"
)

// TPMDirName is the swtpm state directory under the data dir.
const TPMDirName = "fakehw-tpm"

// TPMStateFile is swtpm's state file (TPM 2.0), in TPMDirName and in the
// committed fixture.
const TPMStateFile = "tpm2-00.permall"

// TPMStateEnv names the knob that says where the state to copy is: the
// path of a tpm2-00.permall (the committed testdata/tpm/tpm2-00.permall).
const TPMStateEnv = "BCD_FAKEHW_TPM_STATE"

// ErrNoTPMState means the data dir has no TPM yet and no state was named.
var ErrNoTPMState = errors.New("the fakehw TPM has no state: set " + TPMStateEnv + " to a tpm2-00.permall (testdata/tpm/tpm2-00.permall)")

// tpmCommandTimeout bounds one TPM command (key creation is the slowest).
const tpmCommandTimeout = 30 * time.Second

// OpenTPM starts swtpm on dataDir/fakehw-tpm and connects to it. On the
// first use the directory is created from statePath (a tpm2-00.permall);
// later uses keep the TPM's own state and ignore statePath. The returned
// close disconnects and stops swtpm orderly (TPM2_Shutdown, then the
// control channel's shutdown); call it exactly once.
func OpenTPM(dataDir, statePath string) (*tpm.TPM, func() error, error) {
	dir := filepath.Join(dataDir, TPMDirName)
	if err := seedTPMState(dir, statePath); err != nil {
		return nil, nil, err
	}
	s, err := swtpm.Start(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("the fakehw TPM: %w", err)
	}
	t, err := tpm.Dial(s.Addr(), tpmCommandTimeout)
	if err != nil {
		return nil, nil, errors.Join(err, s.Stop())
	}
	closeTPM := func() error {
		closeErr := t.Close()
		if err := s.Stop(); err != nil {
			return fmt.Errorf("stopping the fakehw TPM: %w", err)
		}
		return closeErr
	}
	return t, closeTPM, nil
}

// seedTPMState copies statePath into dir unless dir already holds a state.
func seedTPMState(dir, statePath string) error {
	target := filepath.Join(dir, TPMStateFile)
	if _, err := os.Stat(target); err == nil {
		return nil
	}
	if statePath == "" {
		return ErrNoTPMState
	}
	state, err := os.ReadFile(statePath)
	if err != nil {
		return fmt.Errorf("the fakehw TPM's state (%s): %w", TPMStateEnv, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return config.WriteFileAtomic(target, state, 0o600)
}
