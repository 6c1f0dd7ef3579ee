package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/testsupport"
)

// TestIssue46_HistoryLint: make lint's history-lint fails on a line that
// names a work session, in any case, and passes on a tree without one;
// make lint runs it.
func TestIssue46_HistoryLint(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	lint := func(dir string) (string, error) {
		cmd := exec.Command("make", "--no-print-directory", "history-lint", "HISTORY_DIR="+dir)
		cmd.Dir = testsupport.ModuleRoot(t)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	clean := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(clean, "performance.md"), []byte("A session of a signer's lease lasts 3 s.\n"), 0o644))
	out, err := lint(clean)
	assert.NoError(t, err, "a tree without work-session references: %s", out)

	for _, line := range []string{"Session %d measured the drain.", "as SESSION %d found", "(session %d, a probe)"} {
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "docs"), 0o755))
		text := fmt.Sprintf(line, 12) // built here: this file must pass the lint too
		require.NoError(t, os.WriteFile(filepath.Join(dir, "docs", "notes.md"), []byte("intro\n"+text+"\n"), 0o644))
		out, err := lint(dir)
		require.Error(t, err, "%q must fail the lint", text)
		assert.Contains(t, out, "notes.md:2:", "the offending line is named")
	}

	_, err = lint(filepath.Join(clean, "missing"))
	assert.Error(t, err, "a directory that cannot be read fails rather than passes")

	// make lint runs it, on the whole tree.
	cmd := exec.Command("make", "-n", "lint")
	cmd.Dir = testsupport.ModuleRoot(t)
	plan, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", plan)
	assert.Contains(t, string(plan), "grep -rIniE 'session [0-9]+' --exclude-dir=.git", "make lint runs history-lint")
}

// TestRepositoryLinksNothingOutside: the repository describes itself; no
// file points at a design brief or folder outside the checkout.
func TestRepositoryLinksNothingOutside(t *testing.T) {
	root := testsupport.ModuleRoot(t)
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	// Built here, so that this file does not match itself.
	outside := []string{"../" + "shared/", "DESIGN" + ".md", "STYLE" + ".md"}
	var found []string
	for _, name := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			continue // removed from the work tree, or binary
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, o := range outside {
				if strings.Contains(line, o) {
					found = append(found, fmt.Sprintf("%s:%d: %s", name, i+1, o))
				}
			}
		}
	}
	assert.Empty(t, found, "references to files outside the repository")
}
