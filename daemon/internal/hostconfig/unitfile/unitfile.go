// Package unitfile reads a host unit: the systemd unit file a pool policy
// became, as far as bcd reads it itself (its [Service] ExecStart= command
// lines and the text StandardInputText= gives them). Systemd reads the
// rest on a host; the fakehw build runs these commands against its fake
// root. It imports nothing of bcd.
package unitfile

import (
	"fmt"
	"regexp"
	"strings"
)

// NamePattern is what a host unit may be called (the helper's rule too).
var NamePattern = regexp.MustCompile(`^bcd-[a-z0-9][a-z0-9-]*\.(service|mount|timer|slice|target|path|socket)$`)

// Unit is a parsed unit file: each section's keys with their values in
// file order.
type Unit struct {
	sections map[string]map[string][]string
}

// Parse reads a unit file: [Section] headers, Key=Value lines, comments
// (# or ;) and blank lines. A line of neither kind, a key outside a section
// or a line continued with a backslash is an error (bcd writes none).
func Parse(content []byte) (*Unit, error) {
	u := &Unit{sections: map[string]map[string][]string{}}
	section := ""
	for n, raw := range strings.Split(string(content), "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			continue
		case strings.HasSuffix(line, `\`):
			return nil, fmt.Errorf("line %d: continued lines are not read", n+1)
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if u.sections[section] == nil {
				u.sections[section] = map[string][]string{}
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				return nil, fmt.Errorf("line %d: %q is neither a section nor a key in one", n+1, line)
			}
			key = strings.TrimSpace(key)
			u.sections[section][key] = append(u.sections[section][key], strings.TrimSpace(value))
		}
	}
	return u, nil
}

// Values are a key's values in a section, in file order.
func (u *Unit) Values(section, key string) []string { return u.sections[section][key] }

// ExecStart are the [Service] ExecStart= command lines as argv (split on
// white space: bcd writes no quoting, and a quote is an error).
func (u *Unit) ExecStart() ([][]string, error) {
	var out [][]string
	for _, line := range u.Values("Service", "ExecStart") {
		if strings.ContainsAny(line, `"'$%;|&<>`+"`") {
			return nil, fmt.Errorf("ExecStart=%s: quoting, specifiers and shell syntax are not read", line)
		}
		if argv := strings.Fields(line); len(argv) > 0 {
			out = append(out, argv)
		}
	}
	return out, nil
}

// StdinText is what StandardInputText= gives the commands: each value and
// a newline, as systemd does.
func (u *Unit) StdinText() string {
	var b strings.Builder
	for _, v := range u.Values("Service", "StandardInputText") {
		b.WriteString(v)
		b.WriteByte('\n')
	}
	return b.String()
}
