// The access section's writer for this agent (docs/daemon.md, "Access"):
// a fakehw machine's files go under its fake root; a host's through bcd
// helper's access.apply when config.toml names the helper (the machine is
// then a helper.HostUnits), else under / when bcd runs as root. An
// unprivileged host bcd without a helper cannot write sshd's files: it
// reconciles no access section (logged access.off).

package agent

import (
	"os"

	"bcd/internal/access"
	"bcd/internal/converge"
)

// rooted is a machine whose files live under a root of their own (fakehw).
type rooted interface{ Root() string }

// accessWriters is a machine that writes the access section itself (a
// host through bcd helper).
type accessWriters interface{ AccessWriter() access.Writer }

// accessReconciler is the access section's reconciler, or nil.
func (a *Agent) accessReconciler() converge.Reconciler {
	if m, ok := a.opts.Machine.(rooted); ok {
		return access.New(access.DirWriter{Root: m.Root()}, a.log)
	}
	if m, ok := a.opts.Machine.(accessWriters); ok {
		return access.New(m.AccessWriter(), a.log)
	}
	if os.Geteuid() == 0 {
		return access.New(access.DirWriter{Root: "/"}, a.log)
	}
	a.log.Info("access.off", "reason", "bcd does not run as root and has no helper socket: it writes no sshd file")
	return nil
}
