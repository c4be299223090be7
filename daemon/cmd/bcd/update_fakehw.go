//go:build fakehw

// Self-update knobs of the fakehw build: BCD_UPDATE_CONFIRM_TIMEOUT (how
// long a new binary waits for its first Welcome before it is rolled back;
// default 60 s), and the never-connecting build, made with
// `go build -tags nonvml,fakehw -ldflags "-X main.neverConnect=true"`.

package main

import (
	"log/slog"
	"time"
)

// neverConnect, set to "true" at link time, makes every dial fail: the
// build that the e2e's rollback scenario releases. Only fakehw has it.
var neverConnect string

// updateKnobs reads BCD_UPDATE_CONFIRM_TIMEOUT (0: the default).
func updateKnobs(getenv func(string) string, log *slog.Logger) time.Duration {
	v := getenv("BCD_UPDATE_CONFIRM_TIMEOUT")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		log.Warn("fakehw.knob_ignored", "knob", "BCD_UPDATE_CONFIRM_TIMEOUT", "reason", "not a positive duration")
		return 0
	}
	log.Info("fakehw.knob", "knob", "BCD_UPDATE_CONFIRM_TIMEOUT", "value", d.String())
	return d
}

// neverConnects says whether this build never connects.
func neverConnects(log *slog.Logger) bool {
	if neverConnect != "true" {
		return false
	}
	log.Warn("fakehw.never_connects", "note", "built with -X main.neverConnect=true: every dial fails")
	return true
}
