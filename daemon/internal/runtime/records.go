// The file-backed runtimes' one shared piece: a domain kept as
// <dir>/<id>.json (runtime/fakehw's domains, runtime/hostfiles' records),
// listed by RecordIDs.

package runtime

import (
	"errors"
	"os"
	"sort"
	"strings"
)

// RecordIDs returns the ids of the <id>.json records in dir, sorted; none
// when dir does not exist.
func RecordIDs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}
