// The export's headers (docs/protocol.md, "Telemetry"): the section's
// headers_ref names a secret of the secret broker whose value is the HTTP
// headers every export carries, in the form OTEL_EXPORTER_OTLP_HEADERS
// gives them ("name=value,name=value", each value percent-encoded), so an
// operator pastes what their OTLP backend hands out. The headers are
// secrets: an error here never quotes a value, and nothing logs them.

package telemetry

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The headers' bounds.
const (
	// MaxHeaders is the most headers a secret may name.
	MaxHeaders = 32
	// MaxHeadersBytes is the largest secret read as headers.
	MaxHeadersBytes = 8 << 10
)

// reserved are the headers an export sets itself or that belong to the
// connection: a secret naming one is refused.
var reserved = map[string]bool{
	"content-type": true, "content-length": true, "content-encoding": true, "host": true,
	"transfer-encoding": true, "connection": true, "te": true, "trailer": true, "upgrade": true,
	"keep-alive": true, "proxy-connection": true,
}

// ErrHeaders is a secret that is not headers; its message says where, never what.
var ErrHeaders = errors.New("the secret is not OTLP headers")

// ParseHeaders reads "name=value,name=value": names are HTTP tokens (each
// once, none of reserved), values are percent-decoded and must be valid
// header values; spaces around names and values are dropped.
func ParseHeaders(text []byte) (http.Header, error) {
	if len(text) > MaxHeadersBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrHeaders, len(text), MaxHeadersBytes)
	}
	entries := strings.Split(string(text), ",")
	if len(entries) > MaxHeaders {
		return nil, fmt.Errorf("%w: %d entries, more than %d", ErrHeaders, len(entries), MaxHeaders)
	}
	h := http.Header{}
	for i, entry := range entries {
		name, value, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: entry %d is not name=value", ErrHeaders, i+1)
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("%w: the name of entry %d is not an HTTP token", ErrHeaders, i+1)
		}
		key := http.CanonicalHeaderKey(name)
		if reserved[strings.ToLower(name)] {
			return nil, fmt.Errorf("%w: entry %d names %s, which the export sets itself", ErrHeaders, i+1, key)
		}
		if _, dup := h[key]; dup {
			return nil, fmt.Errorf("%w: entry %d names %s again", ErrHeaders, i+1, key)
		}
		decoded, err := url.PathUnescape(strings.TrimSpace(value))
		if err != nil || !httpguts.ValidHeaderFieldValue(decoded) {
			return nil, fmt.Errorf("%w: the value of entry %d (%s) is not a percent-encoded header value", ErrHeaders, i+1, key)
		}
		h[key] = []string{decoded}
	}
	return h, nil
}
