// Package metadata is the instances' metadata endpoint (IMDS,
// docs/daemon.md, "The metadata endpoint"): a guest asks it for a
// workload token naming itself, and cloud-init reads its NoCloud seed
// from it (the plan's SMBIOS serial points at /nocloud/). It answers only
// for a running instance, and mints tokens through the session's
// WorkloadTokenRequest (internal/broker).
//
// A request names its instance the way the transport identifies it: on a
// host, its source address on the instance network (ByAddress: bcd helper
// lets each instance's tap send from its own address only, and the
// listeners, bound to each instance bridge, come from the helper:
// ServeListeners); in fakehw, where the guest is simulated, the endpoint
// is served on a unix socket under the data dir (<data_dir>/metadata.sock,
// 0600) and the simulated guest sets the header Bcd-Instance. Tokens and
// user data are never logged.
package metadata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"bcd/internal/refusal"
)

// SocketName is the fakehw endpoint's socket in the data dir.
const SocketName = "metadata.sock"

// InstanceHeader names the instance of a request on the fakehw transport.
const InstanceHeader = "Bcd-Instance"

// MaxAudience bounds a token request's audience.
const MaxAudience = 512

// Instances is what the endpoint asks about instances.
type Instances interface {
	// Running says whether the instance runs now.
	Running(id string) bool
}

// Seeds reads an instance's NoCloud seed (a runtime that keeps seeds).
type Seeds interface {
	// Seed returns the instance's user-data and meta-data.
	Seed(id string) (userData, metaData []byte, err error)
}

// Tokens mints workload tokens.
type Tokens interface {
	// WorkloadToken asks for a token naming instanceID for audience.
	WorkloadToken(ctx context.Context, instanceID, audience string) (string, error)
}

// Config wires an endpoint.
type Config struct {
	Instances Instances
	Seeds     Seeds
	Tokens    Tokens
	// Identify names a request's instance ("" when it names none).
	Identify func(*http.Request) string
	Log      *slog.Logger
}

// ByHeader identifies the instance by the Bcd-Instance header (fakehw).
func ByHeader(r *http.Request) string { return r.Header.Get(InstanceHeader) }

// Owners says which instance holds an address on the instance network.
type Owners interface {
	Owner(addr string) (string, bool)
}

// ByAddress identifies the instance by the request's source address (a
// host): the instance that holds it, or none.
func ByAddress(owners Owners) func(*http.Request) string {
	return func(r *http.Request) string {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return ""
		}
		id, _ := owners.Owner(host)
		return id
	}
}

// ServeListeners serves h on each listener until ctx ends.
func ServeListeners(ctx context.Context, listeners []net.Listener, h http.Handler) {
	for _, lis := range listeners {
		serve(ctx, lis, h, func() {})
	}
}

// Handler serves GET /v1/token?audience=…, GET /nocloud/user-data and
// GET /nocloud/meta-data.
func Handler(cfg Config) http.Handler {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	running := func(w http.ResponseWriter, r *http.Request) (string, bool) {
		id := cfg.Identify(r)
		if id == "" || !cfg.Instances.Running(id) {
			log.Warn("metadata.refused", "instance", id, "path", r.URL.Path, "reason", "not a running instance of this node")
			http.Error(w, "not a running instance of this node", http.StatusNotFound)
			return "", false
		}
		return id, true
	}
	var inFlight sync.Map // instance id → a token request of it on its way
	mux.HandleFunc("GET /v1/token", func(w http.ResponseWriter, r *http.Request) {
		id, ok := running(w, r)
		if !ok {
			return
		}
		audience := r.URL.Query().Get("audience")
		if audience == "" || len(audience) > MaxAudience {
			http.Error(w, fmt.Sprintf("audience is required, at most %d bytes", MaxAudience), http.StatusBadRequest)
			return
		}
		// One token request per instance at a time: a guest cannot queue
		// up requests on the session.
		if _, busy := inFlight.LoadOrStore(id, true); busy {
			http.Error(w, "a token request of this instance is on its way", http.StatusTooManyRequests)
			return
		}
		defer inFlight.Delete(id)
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		token, err := cfg.Tokens.WorkloadToken(ctx, id, audience)
		if err != nil {
			code := string(refusal.CodeOf(err))
			log.Warn("metadata.token_failed", "instance", id, "audience", audience, "code", code, "err", err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		log.Info("metadata.token", "instance", id, "audience", audience)
		w.Header().Set("Content-Type", "application/jwt")
		fmt.Fprint(w, token)
	})
	seed := func(userData bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			id, ok := running(w, r)
			if !ok || cfg.Seeds == nil {
				if ok {
					http.Error(w, "no seed here", http.StatusNotFound)
				}
				return
			}
			ud, md, err := cfg.Seeds.Seed(id)
			if err != nil {
				http.Error(w, "no seed", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			if userData {
				_, _ = w.Write(ud)
			} else {
				_, _ = w.Write(md)
			}
			log.Info("metadata.seed", "instance", id, "user_data", userData)
		}
	}
	mux.HandleFunc("GET /nocloud/user-data", seed(true))
	mux.HandleFunc("GET /nocloud/meta-data", seed(false))
	return mux
}

// Serve serves h on a unix socket at path (0600) until ctx ends.
func Serve(ctx context.Context, path string, h http.Handler) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	old := syscall.Umask(0o177)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return err
	}
	serve(ctx, lis, h, func() { _ = os.Remove(path) })
	return nil
}

// serve serves h on lis until ctx ends, then runs after.
func serve(ctx context.Context, lis net.Listener, h http.Handler, after func()) {
	// A guest is not trusted: small headers, bounded reads, idle
	// connections closed.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	// A callback, not a goroutine waiting: a bcd sim process serves one per agent.
	context.AfterFunc(ctx, func() {
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
		after()
	})
	go func() { _ = srv.Serve(lis) }()
}
