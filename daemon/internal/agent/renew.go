// The agent's renewals: the renew loop runs beside the session for as long
// as the agent runs, and the agent waits for it to end before it returns or
// execs, so no renewal is cut off between the TPM and the data dir. A
// renewal, like a tunnel, goes to the gateway the session is on
// (sessionGateway): with several gateways, the home may be gone.

package agent

import (
	"context"
	"sync"

	"bcd/internal/renew"
)

// sessionGateway is the gRPC gateway the session is on or dialing, one of
// the configuration's list ("" without gateway_url): every gateway serves
// the node, and this one is the one last known to answer.
func (a *Agent) sessionGateway() string {
	if !a.opts.Config.UsesGRPC() {
		return ""
	}
	return a.session.Info().Gateway
}

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
			Gateway:     a.sessionGateway,
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
