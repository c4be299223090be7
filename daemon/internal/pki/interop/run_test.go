// The table of families: every kind belongs to exactly one family.

package interop

import "testing"

func TestEveryKindBelongsToOneFamily(t *testing.T) {
	owner := map[string]string{}
	for _, f := range families {
		for kind := range f.kinds {
			if other, dup := owner[kind]; dup {
				t.Errorf("kind %q is in families %s and %s", kind, other, f.name)
			}
			owner[kind] = f.name
		}
	}
}
