// The file-backed runtimes' shared pieces: a domain kept as
// <dir>/<id>.json (runtime/fakehw's domains, runtime/hostfiles' records),
// read by ReadRecord and listed by RecordIDs.

package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
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

// ReadRecord decodes the JSON record at path (nil when there is none); a
// record that does not decode is an error naming it as what.
func ReadRecord[T any](path, what string) (*T, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec := new(T)
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return rec, nil
}
