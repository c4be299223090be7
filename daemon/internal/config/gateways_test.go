// Tests of the gateway list: gateway_url then gateway_urls without
// duplicates, every entry checked alike, the bound, and the list written
// in place as one array that replaces every line of an earlier one.

package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func parseText(t *testing.T, text string) (*Config, error) {
	t.Helper()
	return Parse([]byte("data_dir = \"/d\"\n"+text), "/etc/bcd/config.toml")
}

func TestTheGatewayListIsGatewayURLThenTheOthersOnce(t *testing.T) {
	for name, tc := range map[string]struct {
		text string
		want []string
	}{
		"one":            {`gateway_url = "https://a:1"`, []string{"https://a:1"}},
		"none":           {``, nil},
		"the home first": {`gateway_url = "https://a:1"` + "\n" + `gateway_urls = ["https://a:1", "https://b:2", "https://c:3"]`, []string{"https://a:1", "https://b:2", "https://c:3"}},
		"home elsewhere": {`gateway_url = "https://b:2"` + "\n" + `gateway_urls = ["https://a:1", "https://b:2", "https://c:3"]`, []string{"https://b:2", "https://a:1", "https://c:3"}},
		"duplicates":     {`gateway_url = "https://a:1"` + "\n" + `gateway_urls = ["https://b:2", "https://a:1", "https://b:2"]`, []string{"https://a:1", "https://b:2"}},
		"empty list":     {`gateway_url = "https://a:1"` + "\n" + `gateway_urls = []`, []string{"https://a:1"}},
		"across lines":   {`gateway_url = "https://a:1"` + "\ngateway_urls = [\n  \"https://a:1\", # home\n  \"https://b:2\",\n]", []string{"https://a:1", "https://b:2"}},
		"h2c":            {"dev_insecure_h2c = true\n" + `gateway_url = "http://a:1"` + "\n" + `gateway_urls = ["http://b:2"]`, []string{"http://a:1", "http://b:2"}},
	} {
		c, err := parseText(t, tc.text)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := c.Gateways(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

func TestEveryGatewayURLIsCheckedAlike(t *testing.T) {
	for name, text := range map[string]string{
		"no scheme":          `gateway_url = "a:1"`,
		"another scheme":     `gateway_url = "https://a:1"` + "\n" + `gateway_urls = ["grpc://b:2"]`,
		"no host":            `gateway_url = "https://a:1"` + "\n" + `gateway_urls = ["https://:443"]`,
		"empty":              `gateway_url = "https://a:1"` + "\n" + `gateway_urls = [""]`,
		"http without h2c":   `gateway_url = "https://a:1"` + "\n" + `gateway_urls = ["http://b:2"]`,
		"credentials":        `gateway_url = "https://a:1"` + "\n" + `gateway_urls = ["https://user:secret@b:2"]`,
		"does not parse":     `gateway_url = "https://a:1"` + "\n" + `gateway_urls = ["https://b:2/%zz"]`,
		"not an array":       `gateway_url = "https://a:1"` + "\n" + `gateway_urls = "https://b:2"`,
		"not strings":        `gateway_url = "https://a:1"` + "\n" + `gateway_urls = [1, 2]`,
		"no gateway_url":     `gateway_urls = ["https://a:1"]`,
		"gateway_url itself": `gateway_url = "ftp://a:1"`,
	} {
		_, err := parseText(t, text)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error names the credentials: %v", name, err)
		}
	}
}

func TestTheGatewayListIsBounded(t *testing.T) {
	urls := func(n int) string {
		var list []string
		for i := range n {
			list = append(list, fmt.Sprintf("https://g%d:1", i))
		}
		return QuoteArray(list)
	}
	c, err := parseText(t, `gateway_url = "https://g0:1"`+"\ngateway_urls = "+urls(MaxGateways))
	if err != nil || len(c.Gateways()) != MaxGateways {
		t.Fatalf("%d gateways: %v", MaxGateways, err)
	}
	for name, text := range map[string]string{
		"too many entries":      `gateway_url = "https://g0:1"` + "\ngateway_urls = " + urls(MaxGateways+1),
		"too many with the url": `gateway_url = "https://home:1"` + "\ngateway_urls = " + urls(MaxGateways),
	} {
		_, err := parseText(t, text)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", MaxGateways)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestForGatewayDialsThatGatewayWithTheSameKeys(t *testing.T) {
	c, err := parseText(t, `gateway_url = "https://a:1"`+"\n"+`gateway_urls = ["https://a:1", "https://b:2"]`+"\nserving_ca_spki_pin = \"pin\"\n")
	if err != nil {
		t.Fatal(err)
	}
	b := c.ForGateway("https://b:2")
	if b.GatewayURL != "https://b:2" || b.ServingCASPKIPin != "pin" || b.ServerName() != "b" || !slices.Equal(b.Gateways(), []string{"https://b:2"}) {
		t.Fatalf("%+v (server name %q)", b, b.ServerName())
	}
	if c.GatewayURL != "https://a:1" || len(c.Gateways()) != 2 {
		t.Fatalf("the original changed: %+v", c)
	}
	c.GatewayServerName = "gw.dev.local"
	if name := c.ForGateway("https://b:2").ServerName(); name != "gw.dev.local" {
		t.Fatalf("server name %q", name)
	}
}

func TestAnArrayIsWrittenOnOneLineAndReplacesEveryLineOfTheOldOne(t *testing.T) {
	text := "gateway_url = \"https://a:1\"\ngateway_urls = [\n  \"https://a:1\", # [home]\n  \"https://old:2\",\n]\nnote = \"\"\"\nnode_id = x\n\"\"\"\nnode_id = \"\"\n[update]\nthreshold = 2\n"
	if _, err := Parse([]byte("data_dir = \"/d\"\n"+text), "/c.toml"); err != nil {
		t.Fatal(err)
	}
	got := string(UpdateEncoded([]byte(text), map[string]string{
		"gateway_urls": QuoteArray([]string{"https://a:1", "https://b:2"}),
		"node_id":      Quote("n1"),
	}, nil))
	want := "gateway_url = \"https://a:1\"\ngateway_urls = [\"https://a:1\", \"https://b:2\"]\nnote = \"\"\"\nnode_id = x\n\"\"\"\nnode_id = \"n1\"\n[update]\nthreshold = 2\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	c, err := Parse([]byte("data_dir = \"/d\"\n"+got), "/c.toml")
	if err != nil || !slices.Equal(c.Gateways(), []string{"https://a:1", "https://b:2"}) || c.NodeID != "n1" {
		t.Fatalf("%+v, %v", c, err)
	}
	// Without a table after it, too.
	got = string(UpdateEncoded([]byte("gateway_urls = [\n  \"https://a:1\",\n]\n"), map[string]string{"gateway_urls": QuoteArray(nil), "node_id": Quote("")}, []string{"node_id"}))
	if got != "gateway_urls = []\nnode_id = \"\"\n" {
		t.Fatalf("got %q", got)
	}
	// A new key goes after the keys in order, before the first table.
	got = string(UpdateEncoded([]byte("gateway_url = \"https://a:1\"\n"), map[string]string{
		"gateway_url":  Quote("https://a:1"),
		"gateway_urls": QuoteArray([]string{"https://a:1", "https://b:2"}),
		"data_dir":     Quote("/d"),
	}, []string{"gateway_url", "gateway_urls", "data_dir"}))
	if got != "gateway_url = \"https://a:1\"\ngateway_urls = [\"https://a:1\", \"https://b:2\"]\ndata_dir = \"/d\"\n" {
		t.Fatalf("got %q", got)
	}
}
