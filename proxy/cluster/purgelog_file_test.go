package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPurgeLogSaveLoad: a saved log comes back with its records, the
// instant it is complete since and when the snapshot was saved; no
// temporary file is left beside it; a log taken back in widens Since
// only backwards.
func TestPurgeLogSaveLoad(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	l := NewPurgeLog(start)
	if got := l.Since(); got != start.UnixNano() {
		t.Fatalf("Since = %d, want %d", got, start.UnixNano())
	}
	l.Add(PurgeRecord{ID: 7, At: 100, Args: "url=%2Fa"})
	l.Add(PurgeRecord{ID: 9, At: 200, Args: "tag=t1"})
	path := filepath.Join(t.TempDir(), "purgelog.json")
	saved := start.Add(time.Minute)
	if err := l.Save(path, saved); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	f, err := LoadPurgeLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.SavedAt != saved.UnixNano() || f.Since != start.UnixNano() {
		t.Errorf("saved_at %d since %d, want %d %d", f.SavedAt, f.Since, saved.UnixNano(), start.UnixNano())
	}
	if len(f.Records) != 2 || f.Records[0].ID != 7 || f.Records[0].Args != "url=%2Fa" || f.Records[0].At != 100 ||
		f.Records[1].ID != 9 || f.Records[1].Seq != 2 {
		t.Errorf("records %+v", f.Records)
	}

	// A new process's log takes the saved one back: Since widens to the
	// saved log's, never forwards.
	l2 := NewPurgeLog(start.Add(time.Hour))
	l2.WidenSince(f.Since)
	if got := l2.Since(); got != start.UnixNano() {
		t.Errorf("after WidenSince(earlier): Since = %d, want %d", got, start.UnixNano())
	}
	l2.WidenSince(start.Add(2 * time.Hour).UnixNano())
	if got := l2.Since(); got != start.UnixNano() {
		t.Errorf("WidenSince(later) moved Since to %d", got)
	}

	// Saving again replaces the file.
	l.Add(PurgeRecord{ID: 11, At: 300, Args: "url=%2Fb"})
	if err := l.Save(path, saved); err != nil {
		t.Fatal(err)
	}
	if f, err := LoadPurgeLog(path); err != nil || len(f.Records) != 3 {
		t.Errorf("after a second save: %d records, %v", len(f.Records), err)
	}
}

// TestPurgeLogLoadErrors: a missing file is reported as such, a corrupt
// one is an error that names the path, and a log cannot be saved into a
// directory that does not exist.
func TestPurgeLogLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadPurgeLog(filepath.Join(dir, "none.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want not-exist", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"saved_at": 1, "records": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPurgeLog(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("corrupt file: %v, want an error naming %s", err, bad)
	}
	l := NewPurgeLog(time.Now())
	if err := l.Save(filepath.Join(dir, "no", "such", "dir", "p.json"), time.Now()); err == nil {
		t.Error("saving into a missing directory succeeded")
	}
	// A directory in the way of the rename: the temporary file is written
	// but cannot replace it.
	taken := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(taken, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.Save(taken, time.Now()); err == nil || !strings.Contains(err.Error(), "save purge log") {
		t.Errorf("saving over a non-empty directory: %v, want an error", err)
	}
}
