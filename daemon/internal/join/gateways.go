// The well-known document's gateways (docs/protocol.md, "The well-known
// document" and "Several gateways"): every gateway a node may dial, the
// one that served the document first. bootstrap writes them as
// gateway_urls, in the document's order, when there are more than one,
// each checked as gateway.url is (config.CheckGatewayURL).

package join

import (
	"fmt"

	"bcd/internal/config"
)

// DocumentGateway is one entry of the document's gateways.
type DocumentGateway struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// gatewayURLs checks the document's gateway.url and gateways and returns
// what bootstrap writes as gateway_urls: the gateways' URLs in order when
// the document lists more than one, nil otherwise (no gateways: gateway.url
// alone). h2c is the configuration's dev_insecure_h2c.
func gatewayURLs(doc *Document, h2c bool) ([]string, error) {
	if err := config.CheckGatewayURL(doc.Gateway.URL, h2c); err != nil {
		return nil, fmt.Errorf("%w: gateway.url: %w", ErrWellKnown, err)
	}
	if n := len(doc.Gateways); n > config.MaxGateways {
		return nil, fmt.Errorf("%w: the document lists %d gateways, bcd takes at most %d", ErrWellKnown, n, config.MaxGateways)
	}
	urls := make([]string, 0, len(doc.Gateways))
	for i, g := range doc.Gateways {
		if err := config.CheckGatewayURL(g.URL, h2c); err != nil {
			return nil, fmt.Errorf("%w: gateways[%d] (%q): %w", ErrWellKnown, i, g.ID, err)
		}
		urls = append(urls, g.URL)
	}
	if len(urls) <= 1 {
		return nil, nil
	}
	return urls, nil
}
