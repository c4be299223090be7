// The helper's server: the socket (its directory root's and the node
// group's, 0750; the socket 0660), the peer check (the configured user,
// running one of the installed slots), and one goroutine per connection
// that runs one operation and logs it (helper.done / helper.refused).

package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"bcd/internal/pki"
	"bcd/internal/refusal"
	"bcd/internal/update"
	"golang.org/x/sys/unix"
)

// Code is a stable refusal code of the helper (the shared refusal.Code).
type Code = refusal.Code

// Error is a refusal of the helper (the shared refusal.Error).
type Error = refusal.Error

func refuse(code Code, format string, args ...any) *Error {
	return refusal.New(code, format, args...)
}

// codeOf is the stable code of any refusal the helper answers: the first
// refusal in err's chain (the helper's own, update's or pki's), a bare code,
// or helper-failed.
func codeOf(err error) string {
	if c := refusal.CodeOf(err); c != "" {
		return string(c)
	}
	var c Code
	if errors.As(err, &c) {
		return string(c)
	}
	return "helper-failed"
}

// Peer is who called.
type Peer struct {
	UID, GID uint32
	PID      int32
	// Exe is /proc/<pid>/exe.
	Exe string
}

// Server answers the node's requests.
type Server struct {
	cfg *Config
	log *slog.Logger
	// uid and gid are the node user's; exes the slots a caller may run.
	uid, gid uint32
	exes     []string
	slots    *update.Slots
	roots    []*pki.PublicKey
	// binder binds verified volumes at root's paths (disks.go).
	binder Binder
	// sysRoot is the host's /sys (guest.go's checks).
	sysRoot string
	// mu serializes the operations: one change of the host at a time.
	mu sync.Mutex
	// peer reads a connection's caller (SO_PEERCRED; tests replace it).
	peer func(*net.UnixConn) (*Peer, error)
}

// Options adjust a server for tests.
type Options struct {
	// UID and GID override the configured user's (tests run unprivileged).
	UID, GID *uint32
	// Exes override the slots a caller may run.
	Exes []string
	// Binder replaces the bind mounts of the domains' disks (tests that
	// cannot mount).
	Binder Binder
	// SysRoot replaces /sys for the host checks of a domain's plan.
	SysRoot string
}

// NewServer checks the configuration and loads the pins and roots.
func NewServer(cfg *Config, log *slog.Logger, opts Options) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, peer: peerOf, binder: mountBinder{}, sysRoot: "/sys"}
	if opts.Binder != nil {
		s.binder = opts.Binder
	}
	if opts.SysRoot != "" {
		s.sysRoot = opts.SysRoot
	}
	if opts.UID != nil && opts.GID != nil {
		s.uid, s.gid = *opts.UID, *opts.GID
	} else {
		u, err := user.Lookup(cfg.Helper.User)
		if err != nil {
			return nil, fmt.Errorf("%w: the node's user %q: %w", ErrConfig, cfg.Helper.User, err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.uid, s.gid = uint32(uid), uint32(gid)
	}
	if cfg.Update != nil {
		dir, err := cfg.SlotsDir()
		if err != nil {
			return nil, err
		}
		policy, err := cfg.Update.Policy()
		if err != nil {
			return nil, err
		}
		s.slots = &update.Slots{Dir: dir, Staged: cfg.Update.Staged, StagedUID: s.uid, Policy: policy, Log: log}
		if s.slots.Staged == "" {
			return nil, fmt.Errorf("%w: %s: [update] staged is not set (the node's staged file)", ErrConfig, cfg.Path)
		}
		s.exes = []string{filepath.Join(dir, update.SlotA), filepath.Join(dir, update.SlotB)}
	}
	if opts.Exes != nil {
		s.exes = opts.Exes
	}
	roots, err := loadRoots(cfg.Helper.CommandRootsDir)
	if err != nil {
		return nil, err
	}
	s.roots = roots
	return s, nil
}

// Listen creates the socket: its directory root's and the node group's
// (0750), the socket 0660 with the node's group, so that only root and
// the node's user reach it.
func (s *Server) Listen() (*net.UnixListener, error) {
	path := s.cfg.Helper.Socket
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 0, int(s.gid)); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	old := syscall.Umask(0o177)
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(path, 0, int(s.gid)); err != nil {
			lis.Close()
			return nil, err
		}
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}

// Serve answers on lis until ctx ends.
func (s *Server) Serve(ctx context.Context, lis *net.UnixListener) error {
	s.log.Info("helper.serving", "socket", s.cfg.Helper.Socket, "uid", s.uid, "slots", s.exes,
		"instance_bridges", s.cfg.Helper.InstanceBridges, "command_roots", len(s.roots))
	go func() {
		<-ctx.Done()
		lis.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := lis.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				s.log.Info("helper.stopped")
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handle(ctx, conn)
		}()
	}
}

// peerOf reads SO_PEERCRED and the caller's executable.
func peerOf(conn *net.UnixConn) (*Peer, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if credErr != nil {
		return nil, credErr
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", cred.Pid))
	if err != nil {
		return nil, err
	}
	return &Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, Exe: exe}, nil
}

// authorize accepts only the node's user running one of the slots.
func (s *Server) authorize(p *Peer) error {
	if p.UID != s.uid {
		return refuse(CodePeer, "uid %d is not the node's user %q (uid %d)", p.UID, s.cfg.Helper.User, s.uid)
	}
	if !slices.Contains(s.exes, p.Exe) {
		return refuse(CodePeer, "pid %d runs %s, not an installed slot %v", p.PID, p.Exe, s.exes)
	}
	return nil
}

func (s *Server) handle(ctx context.Context, conn *net.UnixConn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Minute))
	started := time.Now()
	req := Request{}
	var peer *Peer
	result, err := func() (any, error) {
		var err error
		if peer, err = s.peer(conn); err != nil {
			return nil, refuse(CodePeer, "cannot identify the caller: %v", err)
		}
		if req, err = readRequest(bufio.NewReader(conn)); err != nil {
			return nil, err
		}
		if err := s.authorize(peer); err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.do(ctx, peer, req)
	}()
	attrs := []any{"op", req.Op, "ms", time.Since(started).Milliseconds()}
	if peer != nil {
		attrs = append(attrs, "uid", peer.UID, "pid", peer.PID)
	}
	resp := Response{OK: err == nil}
	var files []*os.File
	if fr, ok := result.(*filesResult); ok {
		result, files = fr.result, fr.files
		defer closeAll(files)
	}
	if err != nil {
		resp.Code, resp.Error = codeOf(err), err.Error()
		s.log.Warn("helper.refused", append(attrs, "code", resp.Code, "err", resp.Error)...)
	} else {
		if result == nil {
			result = struct{}{}
		}
		raw, merr := json.Marshal(result)
		if merr != nil {
			resp = Response{Code: "helper-failed", Error: merr.Error()}
		}
		resp.Result = raw
		s.log.Info("helper.done", attrs...)
	}
	if len(files) == 0 || !resp.OK {
		_ = writeMessage(conn, resp)
		return
	}
	_ = writeWithFiles(conn, resp, files)
}

// writeWithFiles writes a response with open files (SCM_RIGHTS).
func writeWithFiles(conn *net.UnixConn, resp Response, files []*os.File) error {
	data, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_, _, err = conn.WriteMsgUnix(append(data, '\n'), unix.UnixRights(fds...), nil)
	return err
}

// readRequest reads the one request of a connection: a JSON line of at
// most MaxMessage bytes (helper-args otherwise).
func readRequest(r *bufio.Reader) (Request, error) {
	req := Request{}
	if err := readMessage(r, &req); err != nil {
		return Request{}, refuse(CodeArgs, "the request: %v", err)
	}
	return req, nil
}

// decode reads an operation's arguments.
func decode(req Request, v any) error {
	if len(req.Args) == 0 {
		return refuse(CodeArgs, "%s takes arguments", req.Op)
	}
	if err := json.Unmarshal(req.Args, v); err != nil {
		return refuse(CodeArgs, "%s: %v", req.Op, err)
	}
	return nil
}

// do runs one operation.
func (s *Server) do(ctx context.Context, peer *Peer, req Request) (any, error) {
	switch req.Op {
	case OpPing:
		return map[string]any{"uid": peer.UID, "exe": peer.Exe}, nil
	case OpHostApply:
		return s.hostApply(ctx, req)
	case OpHostStart:
		return s.hostStart(ctx, req)
	case OpAccessApply:
		return s.accessApply(req)
	case OpDomainDefine, OpDomainStart, OpDomainDestroy, OpDomainUndefine, OpDomainState:
		return s.domain(ctx, req)
	case OpDomainSetMem:
		return s.setMem(ctx, req)
	case OpDomainStats:
		return s.stats(ctx, req)
	case OpImdsListen:
		return s.imdsListen(ctx)
	case OpChTaps:
		return s.chTaps(ctx, req)
	case OpChTapsDelete:
		return s.chTapsDelete(ctx, req)
	case OpUpdateState, OpUpdatePrepare, OpUpdateSwap, OpUpdateConfirm, OpUpdateRollback, OpUpdateSettle:
		return s.update(req)
	}
	return nil, refuse(CodeOp, "unknown operation %q", req.Op)
}
