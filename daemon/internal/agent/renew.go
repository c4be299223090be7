// The agent's renewals: the renew loop runs beside the session for as long
// as the agent runs, and the agent waits for it to end before it returns or
// execs, so no renewal is cut off between the TPM and the data dir.

package agent

import (
	"context"
	"sync"

	"bcd/internal/renew"
)

// startRenewal starts the renew loop on ctx; stop (idempotent) cancels it
// with cancel and waits for it to end.
func (a *Agent) startRenewal(ctx context.Context, cancel context.CancelFunc) (stop func()) {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		renew.Run(ctx, renew.Config{
			Identity:    a.id,
			Config:      a.opts.Config,
			JoinSigning: a.signing,
			After:       a.opts.RenewAfter,
			AllowH2C:    a.opts.AllowH2C,
			Log:         a.log,
		})
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-ended
		})
	}
}
