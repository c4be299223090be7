// Tests of the inventory golden: write then check passes, a changed byte or
// a stray file fails the check, and the committed golden is fresh.

package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTheInventoryGoldenRoundTrips(t *testing.T) {
	dir := t.TempDir()
	wrote, err := writeInventory(dir)
	if err != nil || len(wrote) != 12 {
		t.Fatalf("wrote %v, %v", wrote, err)
	}
	if err := checkInventory(dir); err != nil {
		t.Fatal(err)
	}
	if again, _ := writeInventory(dir); len(again) != 0 {
		t.Fatalf("a second write changed %v", again)
	}
	path := filepath.Join(inventoryDir(dir), "hgx-h100", "gpus.pb")
	data, _ := os.ReadFile(path)
	data[0] ^= 1
	os.WriteFile(path, data, 0o644)
	if stale, _ := staleInventory(dir); len(stale) != 1 {
		t.Fatalf("stale %v", stale)
	}
	writeInventory(dir)
	os.WriteFile(filepath.Join(inventoryDir(dir), "cpu", "gpus.pb"), []byte{}, 0o644)
	if stale, _ := staleInventory(dir); len(stale) != 1 {
		t.Fatalf("a stray file: stale %v", stale)
	}
}

func TestTheCommittedInventoryGoldenIsFresh(t *testing.T) {
	testdata := filepath.Join("..", "..", "..", "testdata")
	if _, err := os.Stat(inventoryDir(testdata)); err != nil {
		t.Skip("no committed golden yet")
	}
	if stale, err := staleInventory(testdata); err != nil || len(stale) > 0 {
		t.Fatalf("stale %v, %v; run `cargo xtask daemon-fixtures`", stale, err)
	}
}
