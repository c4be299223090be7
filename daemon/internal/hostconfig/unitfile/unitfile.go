// Package unitfile reads a host unit: the systemd unit file a pool policy
// became, as far as bcd reads it itself (its [Service] ExecStart= command
// lines and the text StandardInputText= gives them). Systemd reads the
// rest on a host; the fakehw build runs these commands against its fake
// root. What it does not read it refuses with a code of its own
// (unit-syntax, unit-exec); Render writes a unit back, so that what parses
// renders to a unit that parses the same. It imports nothing of bcd but
// the refusal type.
package unitfile

import (
	"regexp"
	"strings"

	"bcd/internal/refusal"
)

// Code is a stable refusal code of the reader (the shared refusal.Code).
type Code = refusal.Code

// NamePattern is what a host unit may be called (the helper's rule too).
var NamePattern = regexp.MustCompile(`^bcd-[a-z0-9][a-z0-9-]*\.(service|mount|timer|slice|target|path|socket)$`)

// Unit is a parsed unit file: its sections in the order they first came,
// each with its keys in the order they first came and each key's values
// in file order.
type Unit struct {
	order    []string
	sections map[string]*section
}

// section is one [Section] of a unit.
type section struct {
	keys   []string
	values map[string][]string
}

// Parse reads a unit file: [Section] headers, Key=Value lines, comments
// (# or ;) and blank lines. A line of neither kind, a key outside a section
// or a line continued with a backslash is unit-syntax (bcd writes none).
func Parse(content []byte) (*Unit, error) {
	u := &Unit{sections: map[string]*section{}}
	var current *section
	for n, raw := range strings.Split(string(content), "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			continue
		case strings.HasSuffix(line, `\`):
			return nil, refusal.New(CodeSyntax, "line %d: continued lines are not read", n+1)
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			current = u.section(line[1 : len(line)-1])
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || current == nil {
				return nil, refusal.New(CodeSyntax, "line %d: %q is neither a section nor a key in one", n+1, line)
			}
			key = strings.TrimSpace(key)
			if _, seen := current.values[key]; !seen {
				current.keys = append(current.keys, key)
			}
			current.values[key] = append(current.values[key], strings.TrimSpace(value))
		}
	}
	return u, nil
}

// section is the named section, added after the others when it is new.
func (u *Unit) section(name string) *section {
	if s := u.sections[name]; s != nil {
		return s
	}
	s := &section{values: map[string][]string{}}
	u.sections[name] = s
	u.order = append(u.order, name)
	return s
}

// Values are a key's values in a section, in file order.
func (u *Unit) Values(name, key string) []string {
	if s := u.sections[name]; s != nil {
		return s.values[key]
	}
	return nil
}

// Render writes the unit back: each section once, in the order it first
// came, with its keys in the order they first came, every value of a key
// on a line of its own; comments and blank lines are not kept. What Parse
// reads of it is the same unit.
func (u *Unit) Render() []byte {
	var b strings.Builder
	for i, name := range u.order {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("[" + name + "]\n")
		s := u.sections[name]
		for _, key := range s.keys {
			for _, value := range s.values[key] {
				b.WriteString(key + "=" + value + "\n")
			}
		}
	}
	return []byte(b.String())
}

// ExecStart are the [Service] ExecStart= command lines as argv (split on
// white space: bcd writes no quoting, and a quote, a specifier or shell
// syntax is unit-exec).
func (u *Unit) ExecStart() ([][]string, error) {
	var out [][]string
	for _, line := range u.Values("Service", "ExecStart") {
		if strings.ContainsAny(line, Unread) {
			return nil, refusal.New(CodeExec, "ExecStart=%s: quoting, specifiers and shell syntax are not read", line)
		}
		if argv := strings.Fields(line); len(argv) > 0 {
			out = append(out, argv)
		}
	}
	return out, nil
}

// Unread are the characters of an ExecStart= line bcd does not read.
const Unread = `"'$%;|&<>` + "`"

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
