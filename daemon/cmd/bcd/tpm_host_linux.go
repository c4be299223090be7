//go:build !fakehw

// The host build's TPM on Linux: the kernel's resource manager,
// /dev/tpmrm0, which lets bcd share the TPM with other clients.

package main

import (
	"fmt"
	"log/slog"

	"bcd/internal/tpm"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

// tpmDevicePath is the TPM bcd opens.
const tpmDevicePath = "/dev/tpmrm0"

func openTPM(_ string, _ func(string) string, _ *slog.Logger) (*tpm.TPM, func() error, error) {
	t, err := linuxtpm.Open(tpmDevicePath)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the TPM %s: %w", tpmDevicePath, err)
	}
	opened := tpm.Open(t)
	return opened, opened.Close, nil
}
