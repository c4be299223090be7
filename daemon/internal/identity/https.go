// HTTPS to the gateway's HTTPS listener (docs/protocol.md, "WebSocket
// transport"): the WebSocket session and POST /v1/renew. The same pinned
// TLS 1.3 as the gRPC dial (the serving CA's pin, the server name, the
// node's current certificate read at every handshake), with ALPN
// http/1.1, since a WebSocket upgrade is an HTTP/1.1 request (net/http
// offers no ALPN at all for an upgrade, which the listener accepts too).

package identity

import (
	"crypto/tls"
	"net/http"
	"time"

	"bcd/internal/config"
)

// ALPNHTTP1 is the only protocol the HTTPS listener speaks.
const ALPNHTTP1 = "http/1.1"

// HTTPSTimeout bounds a request to the HTTPS listener up to its response
// headers (for the WebSocket, the handshake).
const HTTPSTimeout = 15 * time.Second

// HTTPSClient is a client of the HTTPS listener as the node of id (nil:
// no client certificate). Proxies come from the environment, as for
// grpc-go: a CONNECT proxy carries the TLS session, client certificate
// included, end to end.
func HTTPSClient(c *config.Config, id *Identity) *http.Client {
	var cert func() (*tls.Certificate, error)
	if id != nil {
		cert = func() (*tls.Certificate, error) { return id.Certificate(), nil }
	}
	tlsConfig := ClientTLS(c.ServingCASPKIPin, c.ServerName(), cert)
	tlsConfig.NextProtos = []string{ALPNHTTP1}
	return &http.Client{
		Timeout: HTTPSTimeout,
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     tlsConfig,
			TLSHandshakeTimeout: 10 * time.Second,
			ForceAttemptHTTP2:   false,
		},
	}
}
