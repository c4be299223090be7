// The node's gateway list (docs/protocol.md, "Several gateways"):
// gateway_url, then the entries of gateway_urls that are not it, each
// once and in order, at most MaxGateways in all, every one checked by the
// one rule a gateway's URL is held to (CheckGatewayURL).

package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
)

// MaxGateways is the most gateways a configuration may list, gateway_url
// included; gateway_urls may hold at most as many entries.
const MaxGateways = 16

// ErrGatewayURL marks a gateway URL bcd cannot dial.
var ErrGatewayURL = errors.New("not a gateway URL")

// CheckGatewayURL checks a gateway's URL: https://host[:port], or http://
// with dev_insecure_h2c (h2c, which only fakehw builds dial: the dial
// refuses it elsewhere, identity.ErrInsecureH2C). The host is what bcd
// dials (port 443 when none is given); a URL with credentials in it is
// refused, so none ends up in a log line.
func CheckGatewayURL(raw string, h2c bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: %q: %w", ErrGatewayURL, raw, err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && h2c:
	case u.Scheme == "http":
		return fmt.Errorf("%w: %q is http:// without dev_insecure_h2c", ErrGatewayURL, raw)
	default:
		return fmt.Errorf("%w: %q is not https://host[:port]", ErrGatewayURL, raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%w: %q has no host", ErrGatewayURL, raw)
	}
	if u.User != nil {
		return fmt.Errorf("%w: a gateway URL carries no credentials", ErrGatewayURL)
	}
	return nil
}

// checkGateways checks gateway_url and gateway_urls: every entry a gateway
// URL, gateway_urls only beside gateway_url, and at most MaxGateways of
// them (before and after duplicates are dropped).
func (c *Config) checkGateways() error {
	if len(c.GatewayURLs) > 0 && c.GatewayURL == "" {
		return errors.New("gateway_urls is set without gateway_url")
	}
	if len(c.GatewayURLs) > MaxGateways {
		return fmt.Errorf("gateway_urls lists %d gateways, at most %d", len(c.GatewayURLs), MaxGateways)
	}
	if c.GatewayURL != "" {
		if err := CheckGatewayURL(c.GatewayURL, c.DevInsecureH2C); err != nil {
			return fmt.Errorf("gateway_url: %w", err)
		}
	}
	for i, u := range c.GatewayURLs {
		if err := CheckGatewayURL(u, c.DevInsecureH2C); err != nil {
			return fmt.Errorf("gateway_urls[%d]: %w", i, err)
		}
	}
	if n := len(c.Gateways()); n > MaxGateways {
		return fmt.Errorf("gateway_url and gateway_urls make %d gateways, at most %d", n, MaxGateways)
	}
	return nil
}

// Gateways is the node's gateway list: gateway_url, then each entry of
// gateway_urls that is not already listed, in order; empty without
// gateway_url (the WebSocket alone).
func (c *Config) Gateways() []string {
	if c.GatewayURL == "" {
		return nil
	}
	list := []string{c.GatewayURL}
	for _, u := range c.GatewayURLs {
		if !slices.Contains(list, u) {
			list = append(list, u)
		}
	}
	return list
}

// ForGateway is a copy of c that dials gatewayURL (one of Gateways):
// gateway_url replaced and the list it alone, every other key c's. Its
// server name is gateway_server_name, or by default gatewayURL's host.
func (c *Config) ForGateway(gatewayURL string) *Config {
	copied := *c
	copied.GatewayURL, copied.GatewayURLs = gatewayURL, nil
	return &copied
}
