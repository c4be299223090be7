// The relay of one open tunnel: the shell's terminal output goes to the
// stream as data frames, the stream's data is written to the terminal and
// its resize frames resize it, until the shell exits (its exit status is
// the last frame) or the other side goes away (the shell is hung up). No
// byte that passes is ever logged.

package tunnel

import (
	"errors"
	"io"
	"math"
	"time"

	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/grpc/status"
)

// outputGrace is how long the terminal's last output may take to drain
// after the shell exited (a background job may keep the terminal open).
const outputGrace = 250 * time.Millisecond

// closeGrace is how long bcd waits for the gateway to end the stream after
// its last frame.
const closeGrace = 2 * time.Second

// chunk is the most terminal output one data frame carries.
const chunk = 32 << 10

// relay is one open tunnel being relayed.
type relay struct {
	id     string
	stream Stream
	sh     *shellProc

	outputDone chan struct{}
	sendErr    error // set before outputDone closes

	inputDone   chan struct{}
	inputReason string // set before inputDone closes
}

// outcome is how a relayed tunnel ended: the shell's exit status, or why
// the other side went away.
type outcome struct {
	exited bool
	code   int32
	reason string
}

func newRelay(id string, stream Stream, sh *shellProc) *relay {
	return &relay{id: id, stream: stream, sh: sh, outputDone: make(chan struct{}), inputDone: make(chan struct{})}
}

// run relays until the shell exits or stop closes or the stream ends.
func (r *relay) run(stop <-chan struct{}) outcome {
	go r.pumpOutput()
	go r.pumpInput()
	reason := r.await(stop)
	if reason != "" {
		r.sh.hangUp()
	}
	r.finishOutput()
	if reason == "" && r.sendErr != nil {
		reason = "the stream broke: " + r.sendErr.Error()
	}
	if reason != "" {
		// Tell the gateway, if it still listens, why the tunnel ends.
		why := string(refusal.CodeTunnelGone) + ": " + reason
		_ = r.last(&agentv1.TunnelFrame{TunnelId: r.id, Frame: &agentv1.TunnelFrame_CloseReason{CloseReason: why}})
		return outcome{reason: reason}
	}
	code := r.sh.exitCode()
	if err := r.last(&agentv1.TunnelFrame{TunnelId: r.id, Frame: &agentv1.TunnelFrame_ExitCode{ExitCode: code}}); err != nil {
		return outcome{reason: "the exit status could not be sent: " + err.Error()}
	}
	return outcome{exited: true, code: code}
}

// last sends the tunnel's last frame (once the output is done, so no other
// send runs), half-closes, and waits (closeGrace at most) for the gateway
// to end the stream.
func (r *relay) last(f *agentv1.TunnelFrame) error {
	err := r.stream.Send(f)
	if err == nil {
		_ = r.stream.CloseSend()
	}
	select {
	case <-r.inputDone:
	case <-time.After(closeGrace):
	}
	return err
}

// await waits for the shell to exit ("") or for a reason to hang it up.
func (r *relay) await(stop <-chan struct{}) string {
	output := r.outputDone
	for {
		select {
		case <-r.sh.exited:
			return ""
		case <-r.inputDone:
			return r.inputReason
		case <-stop:
			return "bcd is stopping"
		case <-output:
			if r.sendErr != nil {
				return "the stream broke: " + r.sendErr.Error()
			}
			// The terminal closed: the shell's exit follows.
			output = nil
		}
	}
}

// finishOutput lets the terminal's last output drain, then closes it.
func (r *relay) finishOutput() {
	select {
	case <-r.outputDone:
	case <-time.After(outputGrace):
	}
	_ = r.sh.pty.Close()
	<-r.outputDone
}

// pumpOutput sends the terminal's output until the terminal closes or a
// send fails.
func (r *relay) pumpOutput() {
	defer close(r.outputDone)
	buf := make([]byte, chunk)
	for {
		n, err := r.sh.pty.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			frame := &agentv1.TunnelFrame{TunnelId: r.id, Frame: &agentv1.TunnelFrame_Data{Data: data}}
			if serr := r.stream.Send(frame); serr != nil {
				r.sendErr = serr
				return
			}
		}
		if err != nil {
			// EIO (every process closed the terminal), or we closed it.
			return
		}
	}
}

// pumpInput writes the stream's data to the terminal and applies its
// resizes until the stream ends or the gateway closes the tunnel.
func (r *relay) pumpInput() {
	defer close(r.inputDone)
	for {
		f, err := r.stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			r.inputReason = "the gateway ended the stream"
			return
		case err != nil:
			r.inputReason = "the stream broke: " + status.Convert(err).Message()
			return
		}
		switch x := f.GetFrame().(type) {
		case *agentv1.TunnelFrame_Data:
			// A terminal that is gone shows in the shell's exit.
			_, _ = r.sh.pty.Write(x.Data)
		case *agentv1.TunnelFrame_Resize:
			_ = r.sh.resize(dimension(x.Resize.GetRows()), dimension(x.Resize.GetCols()))
		case *agentv1.TunnelFrame_CloseReason:
			r.inputReason = "the gateway closed it: " + x.CloseReason
			return
		}
	}
}

// dimension clamps a terminal dimension to what a winsize holds (at least 1).
func dimension(v uint32) uint16 {
	return uint16(min(max(v, 1), math.MaxUint16))
}
