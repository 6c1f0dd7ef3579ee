package config

import (
	"flag"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "write docs/configuration.md from the settings table")

const referencePath = "../../docs/configuration.md"

// TestIssue46_ConfigurationDoc: docs/configuration.md is what the settings
// table (the one that drives loading and defaults) says; a setting added,
// changed or documented differently fails it until the file is written
// again (-update).
func TestIssue46_ConfigurationDoc(t *testing.T) {
	want := referenceMarkdown()
	if *update {
		require.NoError(t, os.WriteFile(referencePath, []byte(want), 0o644))
	}
	got, err := os.ReadFile(referencePath)
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "docs/configuration.md is stale: go test ./shared/config -run ConfigurationDoc -update")
}

// TestSettingsTable: every variable Load reads is in the table once, with
// a meaning; and every Env constant of the package names one of them.
func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range settingGroups {
		for _, s := range g.settings {
			assert.False(t, seen[s.env], "%s is listed twice", s.env)
			seen[s.env] = true
			assert.NotEmpty(t, s.doc, "%s has a meaning", s.env)
		}
	}
	src, err := os.ReadFile("config.go")
	require.NoError(t, err)
	shards, err := os.ReadFile("shards.go")
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`(?m)^\s+Env\w+\s*=\s*"(TXFENCE_\w+)"`).FindAllSubmatch(append(src, shards...), -1) {
		assert.True(t, seen[string(m[1])], "%s is in the settings table", m[1])
	}
}
