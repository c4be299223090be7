//go:build !fakehw

// The host build has no self-update knobs and always connects.

package main

import (
	"log/slog"
	"time"
)

func updateKnobs(func(string) string, *slog.Logger) time.Duration { return 0 }

func neverConnects(*slog.Logger) bool { return false }
