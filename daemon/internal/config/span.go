// How many lines a top-level key's value spans, so that UpdateEncoded
// replaces all of it: an array (gateway_urls, say) or an inline table
// may run over several lines, and so may a multi-line string. A small
// scanner of TOML's strings, comments and brackets; the file parsed
// before it is updated, so it needs to be right only for valid TOML.

package config

import "strings"

// valueEnd returns the index of the last line of the value that starts
// after the '=' of lines[first].
func valueEnd(lines []string, first int) int {
	_, rest, _ := strings.Cut(lines[first], "=")
	var sc scanner
	for i := first; i < len(lines); i++ {
		text := lines[i]
		if i == first {
			text = rest
		}
		if sc.line(text) {
			return i
		}
	}
	return len(lines) - 1
}

// scanner is the state between lines: open brackets and an open
// multi-line string (three double or three single quotes).
type scanner struct {
	depth     int
	multiline string
}

// line scans one line and reports whether the value ends on it.
func (sc *scanner) line(text string) bool {
	for i := 0; i < len(text); i++ {
		rest := text[i:]
		switch {
		case sc.multiline != "":
			if sc.multiline == `"""` && rest[0] == '\\' {
				i++
			} else if strings.HasPrefix(rest, sc.multiline) {
				i += 2
				sc.multiline = ""
			}
		case strings.HasPrefix(rest, `"""`), strings.HasPrefix(rest, `'''`):
			sc.multiline = rest[:3]
			i += 2
		case rest[0] == '"':
			i += closing(rest, '"', true)
		case rest[0] == '\'':
			i += closing(rest, '\'', false)
		case rest[0] == '#':
			i = len(text)
		case rest[0] == '[' || rest[0] == '{':
			sc.depth++
		case rest[0] == ']' || rest[0] == '}':
			sc.depth--
		}
	}
	return sc.depth <= 0 && sc.multiline == ""
}

// closing is the offset in s of the quote that closes the one-line string
// s opens (len(s) when none does); escapes count in a basic string.
func closing(s string, quote byte, escapes bool) int {
	for i := 1; i < len(s); i++ {
		switch {
		case escapes && s[i] == '\\':
			i++
		case s[i] == quote:
			return i
		}
	}
	return len(s)
}
