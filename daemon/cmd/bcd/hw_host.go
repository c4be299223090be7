//go:build !fakehw

// The host build: the real machine, and no knobs.

package main

import (
	"log/slog"
	"time"

	"bcd/internal/machine"
)

// fakehwBuild says this build runs on fake hardware.
const fakehwBuild = false

func newMachine(string, func(string) string, string) (machine.Machine, error) {
	return machine.NewHost(), nil
}

type knobs struct {
	renewAfter     time.Duration
	backoffCap     time.Duration
	tpmOtherCSRKey bool
}

func readKnobs(func(string) string, *slog.Logger) knobs { return knobs{} }

func defaultSimSeed(func(string) string) string { return "" }
