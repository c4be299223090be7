//go:build !fakehw && !linux

// The host build's TPM elsewhere: none (bcd runs on Linux).

package main

import (
	"errors"
	"log/slog"

	"bcd/internal/tpm"
)

func openTPM(string, func(string) string, *slog.Logger) (*tpm.TPM, func() error, error) {
	return nil, nil, errors.New("this bcd has no TPM support on this system")
}
