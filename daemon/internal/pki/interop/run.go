// Runs one case through package pki, exactly as the Rust side's
// fixtures/src/interop/run.rs does: Run looks the case's kind up in the table
// of families, and the family's verifier for that kind reads its input,
// calls the verifier a consumer would call, and returns the expect object it
// computed or the refusal's code. Each family is one file of this package,
// the twin of one Rust module (fixtures/src/interop/cases/, and
// fixtures/src/release.rs); a new family is one new file and one line in
// families.

package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"bcd/internal/pki"
)

// verifier runs one case's input through package pki.
type verifier func(*input) (Outcome, error)

// family is one family of cases, as the Rust side's table
// (fixtures/src/interop/cases/mod.rs, FAMILIES) has it: the verifier of each
// kind its generator writes.
type family struct {
	// name is the family's name on the Rust side.
	name string
	// kinds maps each kind of the family to its verifier.
	kinds map[string]verifier
}

// families is every family, in the order of the Rust side's table.
var families = []family{
	dsseFamily,
	x509Family,
	joinFamily,
	tokensFamily,
	intentFamily,
	statementFamily,
	releaseFamily,
}

// lookup returns the verifier of kind, in whichever family has it.
func lookup(kind string) (verifier, bool) {
	for _, f := range families {
		if v, found := f.kinds[kind]; found {
			return v, true
		}
	}
	return nil, false
}

// Outcome is what a case produced: the expect object, or a refusal code.
type Outcome struct {
	// Value is the computed expect object (nil on a refusal).
	Value map[string]any
	// Code is the refusal's code (empty on success).
	Code pki.Code
}

// result turns a verifier's result into an outcome: the expect object that
// describe makes of value, or the refusal's code. An error that is not a
// pki refusal is returned as an error.
func result[T any](value T, err error, describe func(T) map[string]any) (Outcome, error) {
	if err == nil {
		return Outcome{Value: describe(value)}, nil
	}
	if code := pki.CodeOf(err); code != "" {
		return Outcome{Code: code}, nil
	}
	return Outcome{}, fmt.Errorf("not a pki refusal: %w", err)
}

// withEnvelope parses text as a JSON envelope and verifies it: a parse
// refusal is the outcome as much as a verification refusal.
func withEnvelope[T any](text string, verify func(*pki.Envelope) (T, error)) (T, error) {
	env, err := pki.ParseEnvelopeJSON([]byte(text))
	if err != nil {
		var zero T
		return zero, err
	}
	return verify(env)
}

// Run runs one case of kind on its input and returns its outcome; a
// *BadCase error means the case itself is malformed.
func Run(k *Keyring, kind string, raw json.RawMessage) (Outcome, error) {
	in := &input{keys: k}
	if err := json.Unmarshal(raw, &in.members); err != nil || in.members == nil {
		return Outcome{}, badCase("input is not an object")
	}
	run, found := lookup(kind)
	if !found {
		return Outcome{}, badCase("unknown kind %q", kind)
	}
	return run(in)
}

// CheckCase runs c and compares its outcome with the case's expectation.
func CheckCase(k *Keyring, c *Case) error {
	out, err := Run(k, c.Kind, c.Input)
	switch {
	case err != nil:
		return err
	case !c.Positive() && out.Code != pki.Code(c.Error):
		return fmt.Errorf("expected %s, got %s", c.Error, describeOutcome(out))
	case !c.Positive():
		return nil
	case out.Code != "":
		return fmt.Errorf("expected success, got %s", out.Code)
	}
	want, err := normalize(c.Expect)
	if err != nil {
		return badCase("expect: %v", err)
	}
	gotJSON, err := json.Marshal(out.Value)
	if err != nil {
		return err
	}
	got, err := normalize(gotJSON)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("expected %s, got %s", c.Expect, gotJSON)
	}
	return nil
}

func describeOutcome(o Outcome) string {
	if o.Code != "" {
		return string(o.Code)
	}
	return "success"
}

// normalize parses JSON with numbers kept as their text, for comparison.
func normalize(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}
