//go:build fakehw

// The fakehw build: fake hardware under data_dir/fakehw-root, a swtpm as
// its TPM (data_dir/fakehw-tpm), and its knobs (BCD_FAKEHW_SEED,
// BCD_FAKEHW_VARIANT, BCD_RENEW_AFTER, BCD_FAKEHW_BACKOFF_CAP,
// BCD_FAKEHW_TPM_STATE, BCD_FAKEHW_TPM_CSR_KEY, and the failure knobs of
// internal/fakehw/faults.go). A build without fakehw has none of them.

package main

import (
	"log/slog"
	"path/filepath"
	"time"

	"bcd/internal/config"
	"bcd/internal/fakehw"
	"bcd/internal/machine"
	"bcd/internal/tpm"
)

// fakehwBuild says this build runs on fake hardware.
const fakehwBuild = true

// withHostUnits is m: the fake machine applies host units itself.
func withHostUnits(m machine.Machine, _ *config.Config, _ *slog.Logger) (machine.Machine, error) {
	return m, nil
}

// newMachine returns the fake machine of the knobs; seed overrides
// BCD_FAKEHW_SEED when not empty (bcd sim).
func newMachine(dataDir string, getenv func(string) string, seed string) (machine.Machine, error) {
	if seed == "" {
		seed = getenv("BCD_FAKEHW_SEED")
	}
	if seed == "" {
		seed = fakehw.DefaultSeed
	}
	variant := getenv("BCD_FAKEHW_VARIANT")
	if variant == "" {
		variant = fakehw.DefaultVariant
	}
	m, err := fakehw.New(dataDir, seed, variant)
	if err != nil {
		return nil, err
	}
	faults, _ := fakehw.FaultsFromEnv(getenv)
	m.SetFaults(faults)
	return m, nil
}

// knobs are the fakehw build's tuning knobs.
type knobs struct {
	renewAfter time.Duration
	backoffCap time.Duration
	// tpmOtherCSRKey (BCD_FAKEHW_TPM_CSR_KEY=other) signs the TPM join's
	// CSR with a software key, for the node-key-not-csr refusal.
	tpmOtherCSRKey bool
}

// openTPM starts the fakehw TPM: swtpm on data_dir/fakehw-tpm, whose state
// is copied from BCD_FAKEHW_TPM_STATE (a tpm2-00.permall) on first use.
func openTPM(dataDir string, getenv func(string) string, log *slog.Logger) (*tpm.TPM, func() error, error) {
	state := getenv(fakehw.TPMStateEnv)
	t, closeTPM, err := fakehw.OpenTPM(dataDir, state)
	if err != nil {
		return nil, nil, err
	}
	log.Info("fakehw.tpm", "state_dir", filepath.Join(dataDir, fakehw.TPMDirName), "knob_state", state)
	return t, closeTPM, nil
}

// readKnobs reads and logs the knobs.
func readKnobs(getenv func(string) string, log *slog.Logger) knobs {
	var k knobs
	for name, dst := range map[string]*time.Duration{"BCD_RENEW_AFTER": &k.renewAfter, "BCD_FAKEHW_BACKOFF_CAP": &k.backoffCap} {
		v := getenv(name)
		if v == "" {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			log.Warn("fakehw.knob_ignored", "knob", name, "reason", "not a positive duration")
			continue
		}
		*dst = d
		log.Info("fakehw.knob", "knob", name, "value", d.String())
	}
	faults, bad := fakehw.FaultsFromEnv(getenv)
	for _, name := range faults.Active() {
		log.Info("fakehw.knob", "knob", name, "value", getenv(name))
	}
	for _, name := range bad {
		log.Warn("fakehw.knob_ignored", "knob", name, "reason", "not a value it takes")
	}
	switch v := getenv("BCD_FAKEHW_TPM_CSR_KEY"); v {
	case "", "tpm":
	case "other":
		k.tpmOtherCSRKey = true
		log.Info("fakehw.knob", "knob", "BCD_FAKEHW_TPM_CSR_KEY", "value", v)
	default:
		log.Warn("fakehw.knob_ignored", "knob", "BCD_FAKEHW_TPM_CSR_KEY", "reason", "neither tpm nor other")
	}
	return k
}

// defaultSimSeed is the first seed of bcd sim without --seed.
func defaultSimSeed(getenv func(string) string) string {
	if s := getenv("BCD_FAKEHW_SEED"); s != "" {
		return s
	}
	return fakehw.DefaultSeed
}
