// The access section's writer for this agent (docs/daemon.md, "Access"):
// a fakehw machine's files go under its fake root; a host's under / when
// bcd runs as root. An unprivileged host bcd (the bcd user) cannot write
// sshd's files, so it reconciles no access section (logged access.off)
// until bcd helper writes them for it.

package agent

import (
	"os"

	"bcd/internal/access"
	"bcd/internal/converge"
)

// rooted is a machine whose files live under a root of their own (fakehw).
type rooted interface{ Root() string }

// accessReconciler is the access section's reconciler, or nil.
func (a *Agent) accessReconciler() converge.Reconciler {
	if m, ok := a.opts.Machine.(rooted); ok {
		return access.New(access.DirWriter{Root: m.Root()}, a.log)
	}
	if os.Geteuid() == 0 {
		return access.New(access.DirWriter{Root: "/"}, a.log)
	}
	a.log.Info("access.off", "reason", "bcd does not run as root and writes no sshd file")
	return nil
}
