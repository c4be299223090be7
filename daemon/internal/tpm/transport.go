// The byte stream to a TPM: swtpm's data channel carries raw TPM 2.0
// commands and responses over TCP, one client at a time.

package tpm

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/google/go-tpm/tpm2/transport"
)

// maxResponse bounds a response's declared size (a TPM's is at most a few KiB).
const maxResponse = 1 << 16

// stream sends framed TPM commands over a connection: it reads the 10-byte
// response header, then exactly the rest of the response, so a response
// split across TCP segments is never cut short.
type stream struct {
	conn    net.Conn
	timeout time.Duration
}

// Send implements transport.TPM.
func (s *stream) Send(command []byte) ([]byte, error) {
	if s.timeout > 0 {
		if err := s.conn.SetDeadline(time.Now().Add(s.timeout)); err != nil {
			return nil, err
		}
	}
	if _, err := s.conn.Write(command); err != nil {
		return nil, fmt.Errorf("sending a TPM command: %w", err)
	}
	header := make([]byte, 10)
	if _, err := io.ReadFull(s.conn, header); err != nil {
		return nil, fmt.Errorf("reading a TPM response: %w", err)
	}
	size := binary.BigEndian.Uint32(header[2:6])
	if size < 10 || size > maxResponse {
		return nil, fmt.Errorf("a TPM response of %d bytes", size)
	}
	rsp := make([]byte, size)
	copy(rsp, header)
	if _, err := io.ReadFull(s.conn, rsp[10:]); err != nil {
		return nil, fmt.Errorf("reading a TPM response: %w", err)
	}
	return rsp, nil
}

// Close implements transport.TPMCloser.
func (s *stream) Close() error { return s.conn.Close() }

// Dial connects to a TPM that speaks raw commands over TCP (swtpm's data
// channel, `--server type=tcp`) at addr ("127.0.0.1:2321"). Every command
// must be answered within timeout (0: no limit).
func Dial(addr string, timeout time.Duration) (*TPM, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connecting to the TPM at %s: %w", addr, err)
	}
	return Open(&stream{conn: conn, timeout: timeout}), nil
}

var _ transport.TPMCloser = (*stream)(nil)
