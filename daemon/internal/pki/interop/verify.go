// Verification of a whole document: every case and every re-production,
// counted for the one-line summary of `bcd-fixtures verify`.

package interop

import "fmt"

// Summary counts what a document's verification covered.
type Summary struct {
	// Positive and Negative count the cases that passed.
	Positive, Negative int
	// Reproduced counts the byte strings re-produced byte for byte.
	Reproduced int
}

// Cases is the number of cases that passed.
func (s Summary) Cases() int { return s.Positive + s.Negative }

// Add adds another summary's counts.
func (s Summary) Add(o Summary) Summary {
	return Summary{Positive: s.Positive + o.Positive, Negative: s.Negative + o.Negative, Reproduced: s.Reproduced + o.Reproduced}
}

// String is the summary line.
func (s Summary) String() string {
	return fmt.Sprintf("%d cases (%d positive, %d negative) and %d reproduced byte-for-byte",
		s.Cases(), s.Positive, s.Negative, s.Reproduced)
}

// Failure is a case or re-production that failed.
type Failure struct {
	// Name names the case or re-production.
	Name string
	// Err says why.
	Err error
}

func (f Failure) Error() string { return f.Name + ": " + f.Err.Error() }

// Verify runs every case and re-production of doc and counts those that pass.
func Verify(doc *Document) (Summary, []Failure) {
	var sum Summary
	var failures []Failure
	keys := NewKeyring(doc.Seed, doc.Keys)
	for i := range doc.Cases {
		c := &doc.Cases[i]
		if err := CheckCase(keys, c); err != nil {
			failures = append(failures, Failure{Name: c.Name, Err: err})
			continue
		}
		switch {
		case !c.Positive():
			sum.Negative++
		case ByteExactKinds[c.Kind]:
			sum.Positive++
			sum.Reproduced++
		default:
			sum.Positive++
		}
	}
	for _, r := range Reproductions(doc, keys) {
		if err := r.Check(); err != nil {
			failures = append(failures, Failure{Name: "reproduce/" + r.Name, Err: err})
			continue
		}
		sum.Reproduced++
	}
	return sum, failures
}
