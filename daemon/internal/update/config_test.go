// The [update] table's reader: keys are lowercase and case-sensitive.

package update

import (
	"strings"
	"testing"
)

func TestParseConfigRefusesAKeyInAnotherCase(t *testing.T) {
	if c, err := ParseConfig(map[string]any{"dir": "/var/lib/bcd/slots"}); err != nil || c.Dir != "/var/lib/bcd/slots" {
		t.Fatalf("%+v, %v", c, err)
	}
	_, err := ParseConfig(map[string]any{"Dir": "/var/lib/bcd/slots"})
	if err == nil || !strings.Contains(err.Error(), `no key "Dir"`) {
		t.Fatalf("a key in another case: %v", err)
	}
}
