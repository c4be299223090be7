// Package helper is `bcd helper`: the root helper that an unprivileged bcd
// (the `bcd` user) asks for the few privileged operations it needs, over a
// unix socket (docs/daemon.md, "bcd helper"). The protocol is one JSON
// request per connection, {"op", "args"}, answered by one JSON response,
// {"ok", "result"} or {"ok": false, "code", "error"}, each on one line of at
// most 1 MiB. The helper answers only a peer running as the configured user
// from one of the installed slots (SO_PEERCRED and /proc/<pid>/exe).
package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// MaxMessage bounds a request or a response.
const MaxMessage = 1 << 20

// The operations.
const (
	OpPing           = "ping"
	OpHostApply      = "host.apply"
	OpHostStart      = "host.start"
	OpAccessApply    = "access.apply"
	OpDomainDefine   = "domain.define"
	OpDomainStart    = "domain.start"
	OpDomainDestroy  = "domain.destroy"
	OpDomainUndefine = "domain.undefine"
	OpDomainState    = "domain.state"
	OpDomainSetMem   = "domain.setmem"
	OpDomainStats    = "domain.stats"
	OpImdsListen     = "imds.listen"
	OpChTaps         = "ch.taps"
	OpChTapsDelete   = "ch.taps.delete"
	OpUpdateState    = "update.state"
	OpUpdatePrepare  = "update.prepare"
	OpUpdateSwap     = "update.swap"
	OpUpdateConfirm  = "update.confirm"
	OpUpdateRollback = "update.rollback"
	OpUpdateSettle   = "update.settle"
)

// Request is what the node sends.
type Request struct {
	// Op names the operation.
	Op string `json:"op"`
	// Args are the operation's arguments (an object).
	Args json.RawMessage `json:"args,omitempty"`
}

// Response is what the helper answers.
type Response struct {
	// OK says the operation was done.
	OK bool `json:"ok"`
	// Result is the operation's result when OK.
	Result json.RawMessage `json:"result,omitempty"`
	// Code is the refusal's stable code when not OK.
	Code string `json:"code,omitempty"`
	// Error is "<code>: <detail>" when not OK.
	Error string `json:"error,omitempty"`
}

// Refusal is a response that is not OK, as an error: its text is the
// helper's "<code>: <detail>", and errors.Is matches its code against a
// Code of this package, of update or of pki.
type Refusal struct {
	// Code is the stable code.
	Code string
	// Message is the whole text.
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// Is matches any error whose text is the code (update.Code, pki.Code, Code).
func (r *Refusal) Is(target error) bool {
	return target != nil && target.Error() == r.Code
}

// ErrTransport marks a failure to reach or read the helper.
var ErrTransport = errors.New("bcd helper unreachable")

// Call sends one request to the helper at socket and decodes the result
// into result (when not nil).
func Call(ctx context.Context, socket, op string, args, result any) error {
	files, err := CallFiles(ctx, socket, op, args, result)
	for _, f := range files {
		f.Close()
	}
	return err
}

// maxFiles bounds the descriptors a response may carry.
const maxFiles = 16

// CallFiles is Call for an operation that answers with open files too
// (imds.listen): they come with the response (SCM_RIGHTS), in order.
func CallFiles(ctx context.Context, socket, op string, args, result any) ([]*os.File, error) {
	req := Request{Op: op}
	if args != nil {
		raw, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		req.Args = raw
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTransport, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	} else {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	}
	if err := writeMessage(conn, req); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTransport, err)
	}
	rights := &rightsReader{conn: conn}
	resp := Response{}
	if err := readMessage(bufio.NewReader(rights), &resp); err != nil {
		closeAll(rights.files)
		return nil, fmt.Errorf("%w: %w", ErrTransport, err)
	}
	if !resp.OK {
		closeAll(rights.files)
		return nil, &Refusal{Code: resp.Code, Message: resp.Error}
	}
	if result != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			closeAll(rights.files)
			return nil, err
		}
	}
	return rights.files, nil
}

// rightsReader reads a connection and keeps the descriptors that come
// with its bytes.
type rightsReader struct {
	conn  *net.UnixConn
	files []*os.File
}

func (r *rightsReader) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*maxFiles))
	n, oobn, _, _, err := r.conn.ReadMsgUnix(p, oob)
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			fds, ferr := unix.ParseUnixRights(&m)
			if perr != nil || ferr != nil {
				continue
			}
			for _, fd := range fds {
				r.files = append(r.files, os.NewFile(uintptr(fd), "helper-fd"))
			}
		}
	}
	return n, err
}

func writeMessage(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) >= MaxMessage {
		return fmt.Errorf("message of %d bytes, at most %d", len(data), MaxMessage)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func readMessage(r *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return err
		}
		line = append(line, chunk...)
		if len(line) >= MaxMessage {
			return fmt.Errorf("message over %d bytes", MaxMessage)
		}
		if !isPrefix {
			break
		}
	}
	return json.Unmarshal(line, v)
}
