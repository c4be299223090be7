//go:build fakehw

// The fakehw build: fake hardware under data_dir/fakehw-root and its knobs
// (BCD_FAKEHW_SEED, BCD_FAKEHW_VARIANT, BCD_RENEW_AFTER,
// BCD_FAKEHW_BACKOFF_CAP). A build without fakehw has none of them.

package main

import (
	"log/slog"
	"time"

	"bcd/internal/fakehw"
	"bcd/internal/machine"
)

// fakehwBuild says this build runs on fake hardware.
const fakehwBuild = true

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
	return fakehw.New(dataDir, seed, variant)
}

// knobs are the fakehw build's tuning knobs.
type knobs struct {
	renewAfter time.Duration
	backoffCap time.Duration
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
	if k.renewAfter > 0 {
		log.Info("renew.after", "after", k.renewAfter.String(), "note", "renewal comes in a later issue")
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
