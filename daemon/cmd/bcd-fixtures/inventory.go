// testdata/daemon/inventory/: the Go-to-Rust golden of fakehw's inventory
// sections. For every variant at seed 41, <variant>/<section>.pb is the
// deterministic protobuf encoding bcd sends, and hashes.json lists each
// section's lowercase hex SHA-256. Everything here is deterministic, so
// check compares bytes.

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"bcd/internal/fakehw"
)

// inventorySeed is the seed of the golden.
const inventorySeed = "41"

// inventoryDir is the golden's directory under a testdata directory.
func inventoryDir(testdata string) string { return filepath.Join(testdata, "daemon", "inventory") }

type hashesFile struct {
	Seed     string          `json:"seed"`
	Variants []variantHashes `json:"variants"`
}

type variantHashes struct {
	Variant  string        `json:"variant"`
	Sections []sectionHash `json:"sections"`
}

type sectionHash struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// inventoryFiles builds every golden file, by path relative to the
// inventory directory.
func inventoryFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	hashes := hashesFile{Seed: inventorySeed}
	for _, variant := range fakehw.Variants {
		inv, err := fakehw.GenerateInventory(inventorySeed, variant)
		if err != nil {
			return nil, err
		}
		sections, err := inv.Sections()
		if err != nil {
			return nil, err
		}
		vh := variantHashes{Variant: variant}
		for _, s := range sections {
			files[filepath.Join(variant, s.GetName()+".pb")] = s.GetContent()
			vh.Sections = append(vh.Sections, sectionHash{Name: s.GetName(), SHA256: s.GetSha256()})
		}
		hashes.Variants = append(hashes.Variants, vh)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(hashes); err != nil {
		return nil, err
	}
	files["hashes.json"] = buf.Bytes()
	return files, nil
}

// staleInventory lists the golden files that are missing or differ, and
// files in the directory the writer would not write.
func staleInventory(testdata string) ([]string, error) {
	files, err := inventoryFiles()
	if err != nil {
		return nil, err
	}
	dir := inventoryDir(testdata)
	var stale []string
	for rel, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || !bytes.Equal(got, want) {
			stale = append(stale, rel)
		}
	}
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		if _, ok := files[rel]; !ok && rel != "README.md" {
			stale = append(stale, rel+" (not written by bcd-fixtures)")
		}
		return nil
	})
	sort.Strings(stale)
	return stale, nil
}

// writeInventory writes the golden files that differ and returns them.
func writeInventory(testdata string) ([]string, error) {
	files, err := inventoryFiles()
	if err != nil {
		return nil, err
	}
	dir := inventoryDir(testdata)
	var wrote []string
	for rel, data := range files {
		path := filepath.Join(dir, rel)
		if got, err := os.ReadFile(path); err == nil && bytes.Equal(got, data) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, err
		}
		wrote = append(wrote, rel)
	}
	sort.Strings(wrote)
	return wrote, nil
}

// checkInventory fails when a golden file is stale.
func checkInventory(testdata string) error {
	stale, err := staleInventory(testdata)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		for _, s := range stale {
			fmt.Fprintf(os.Stderr, "stale: testdata/daemon/inventory/%s\n", s)
		}
		return errors.New("the inventory golden is stale; run `cargo xtask daemon-fixtures`")
	}
	return nil
}
