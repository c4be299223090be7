// Strict encodings shared with the Rust side: canonical base64 (standard with
// padding, URL-safe without), JSON objects read the way serde reads a struct,
// and JSON strings written the way serde_json writes them.

package pki

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

var (
	stdStrict = base64.StdEncoding.Strict()
	urlStrict = base64.RawURLEncoding.Strict()
)

// decodeStd decodes canonical standard base64 with padding. Unlike
// encoding/base64 it refuses embedded line breaks, as the Rust side does.
func decodeStd(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("line break in base64")
	}
	return stdStrict.DecodeString(s)
}

// decodeURL decodes canonical URL-safe base64 without padding, refusing line
// breaks.
func decodeURL(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("line break in base64url")
	}
	return urlStrict.DecodeString(s)
}

// encodeStd is standard base64 with padding.
func encodeStd(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// encodeURL is URL-safe base64 without padding.
func encodeURL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jsonObject holds the members of one JSON object, read the way serde reads
// a struct: member names are exact (no case folding), null counts as absent
// for optional members and as a type error for required ones, and the text
// must be strict JSON (see checkStrictJSON).
type jsonObject map[string]json.RawMessage

// parseObject reads data as exactly one JSON object. known lists the members
// the caller reads; with denyUnknown, any other member is refused too.
func parseObject(data []byte, denyUnknown bool, known ...string) (jsonObject, error) {
	if err := checkStrictJSON(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	obj := jsonObject{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		isKnown := contains(known, name)
		if !isKnown && denyUnknown {
			return nil, fmt.Errorf("unknown member %q", name)
		}
		if !isKnown {
			continue
		}
		obj[name] = value
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return obj, nil
}

// maxJSONDepth is serde_json's recursion limit: the 128th nested array or
// object is refused there, so it is here.
const maxJSONDepth = 127

// checkStrictJSON refuses what the Rust side's strict reader (pki/src/json.rs)
// refuses and encoding/json would take: invalid UTF-8, a member name twice in
// one object at any depth (docs/formats.md, "JSON"), nesting deeper than
// serde_json's limit, a number out of float64's range, and an unpaired UTF-16
// surrogate escape (encoding/json replaces it with U+FFFD).
func checkStrictJSON(data []byte) error {
	if !utf8.Valid(data) {
		return errors.New("not UTF-8")
	}
	if err := checkSurrogates(data); err != nil {
		return err
	}
	type frame struct {
		names   map[string]bool // nil for an array
		wantKey bool
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].names != nil && stack[top].wantKey {
			if name, ok := tok.(string); ok {
				if stack[top].names[name] {
					return fmt.Errorf("duplicate member %q", name)
				}
				stack[top].names[name] = true
				stack[top].wantKey = false
				continue
			}
		}
		if top >= 0 && stack[top].names != nil {
			stack[top].wantKey = true // this token is a member's value
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{names: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
		}
		if len(stack) > maxJSONDepth {
			return errors.New("nested too deep")
		}
	}
}

// checkSurrogates refuses a \uD800-\uDBFF escape not followed by a
// \uDC00-\uDFFF one, and a \uDC00-\uDFFF escape not preceded by one.
func checkSurrogates(data []byte) error {
	inString, high := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch {
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(data) && data[i+1] == 'u' && i+5 < len(data):
			v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
			if err != nil {
				return nil // not a valid escape: the decoder refuses it
			}
			isHigh, isLow := v >= 0xD800 && v <= 0xDBFF, v >= 0xDC00 && v <= 0xDFFF
			if high != isLow || (high && isHigh) {
				return errors.New("unpaired surrogate escape")
			}
			high = isHigh
			i += 5
			continue
		case c == '\\':
			i++ // a one-character escape: skip the character
		}
		if high {
			return errors.New("unpaired surrogate escape")
		}
	}
	if high {
		return errors.New("unpaired surrogate escape")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// present reports whether a member is there and not null.
func (o jsonObject) present(name string) bool {
	raw, ok := o[name]
	return ok && !isNull(raw)
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// required decodes a member that must be present and not null into v.
func (o jsonObject) required(name string, v any) error {
	if !o.present(name) {
		return fmt.Errorf("missing member %q", name)
	}
	if _, ok := v.(*int64); ok && string(bytes.TrimSpace(o[name])) == "-0" {
		// serde_json reads -0 as a float, which an integer member refuses.
		return fmt.Errorf("member %q: -0 is not an integer", name)
	}
	if err := json.Unmarshal(o[name], v); err != nil {
		return fmt.Errorf("member %q: %w", name, err)
	}
	return nil
}

// requiredAll decodes several required members, each into its destination.
func (o jsonObject) requiredAll(members map[string]any) error {
	for name, dst := range members {
		if err := o.required(name, dst); err != nil {
			return err
		}
	}
	return nil
}

// optionalStrings decodes several optional string members.
func (o jsonObject) optionalStrings(members map[string]*string) error {
	for name, dst := range members {
		var err error
		if *dst, err = o.optionalString(name); err != nil {
			return err
		}
	}
	return nil
}

// optionalString decodes a member that may be absent or null ("" then).
func (o jsonObject) optionalString(name string) (string, error) {
	if !o.present(name) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(o[name], &s); err != nil {
		return "", fmt.Errorf("member %q: %w", name, err)
	}
	return s, nil
}

// appendJSONString appends s as a JSON string exactly as serde_json writes
// it: only the quote, the backslash and control characters are escaped (the
// short forms \b \t \n \f \r, else \u00xx in lowercase hex); '<', '>', '&'
// and U+2028/U+2029 stay as they are, unlike encoding/json. Invalid UTF-8
// (which a Rust string cannot hold) becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	s = strings.ToValidUTF8(s, "\uFFFD")
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			dst = append(dst, '\\', '"')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
