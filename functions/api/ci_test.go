package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue11_FuzzAndLintInCI: the fuzz targets issue 11 asks for exist with
// a committed seed corpus, make test runs every fuzz target, make lint runs
// the OpenAPI lint, and CI runs both. (The targets and the lint themselves
// run in make fuzz and make lint; this keeps them from quietly dropping out.)
func TestIssue11_FuzzAndLintInCI(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		require.NoError(t, err)
		return string(b)
	}
	targets := map[string]string{ // what is parsed → where its target lives
		"FuzzDecodeCreate":       "functions/api",  // the create decoder and validation
		"FuzzClassify":           "shared/evm",     // the broadcast error classifier
		"FuzzVerify":             "shared/webhook", // webhook signature header
		"FuzzParseAuthorization": "shared/auth",    // the Authorization header
		"FuzzParseAPIKey":        "shared/auth",
		"FuzzOIDCAuthenticate":   "shared/auth",
	}
	for name, dir := range targets {
		files, err := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
		require.NoError(t, err)
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			found = found || regexp.MustCompile(`(?m)^func `+name+`\(f \*testing\.F\)`).Match(b)
		}
		assert.True(t, found, "%s in %s", name, dir)
		seeds, _ := os.ReadDir(filepath.Join(root, dir, "testdata", "fuzz", name))
		assert.NotEmpty(t, seeds, "%s has a committed seed corpus", name)
	}

	mk := read("Makefile")
	assert.Regexp(t, `(?m)^test:[^\n]*\n(\t[^\n]*\n)*\t@?\$\(MAKE\)[^\n]* fuzz$`, mk, "make test runs make fuzz")
	assert.Regexp(t, `(?m)^lint:[^\n]*\bopenapi-lint\b`, mk, "make lint runs the OpenAPI lint")
	assert.Regexp(t, `\$\(REDOCLY\) lint --config `, mk, "openapi-lint runs redocly lint")
	ci := read(".ci/run")
	assert.Regexp(t, `(?m)^make lint$`, ci)
	assert.Regexp(t, `(?m)^make test$`, ci)
}

// TestProblemTypesDocumented: every problem type the API answers with is
// in the OpenAPI document's Problem schema, and the schema lists no other.
func TestProblemTypesDocumented(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(openapiDoc, &doc))
	documented := doc.Components.Schemas["Problem"].Properties["type"].Enum
	var used []string
	for _, k := range problemTypes {
		if !slices.Contains(used, problemBase+k.slug) {
			used = append(used, problemBase+k.slug)
		}
	}
	assert.ElementsMatch(t, used, documented)
}

// TestDocsNameRealTests: every test the documentation names (docs/*.md and
// the README, in backquotes) exists, so that a renamed or removed test
// does not leave a claim behind that nothing checks.
func TestDocsNameRealTests(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".tools" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	require.NoError(t, err)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	docs = append(docs, filepath.Join(root, "README.md"))
	named := regexp.MustCompile("`(Test[A-Z]\\w*[a-z0-9])`")
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range named.FindAllSubmatch(b, -1) {
			assert.True(t, defined[string(m[1])], "%s names %s, which no test file defines", filepath.Base(doc), m[1])
		}
	}
}

// TestIssue49_ExamplesAgainstDevInCI: CI runs make examples after make
// test, and make examples runs the Go example against the make dev stack
// and checks that it says every transaction was confirmed. (The run itself
// is make examples; this keeps it from quietly dropping out of CI.)
func TestIssue49_ExamplesAgainstDevInCI(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		require.NoError(t, err)
		return string(b)
	}
	ci := read(".ci/run")
	assert.Regexp(t, `(?s)\nmake test\n.*\nmake examples\n`, ci, "CI runs make examples after make test")
	mk := read("Makefile")
	assert.Regexp(t, `(?m)^examples:[^\n]*\bbin-server\b[^\n]*\bbin-emulator\b[^\n]*\n\t[^\n]*examples/run-against-dev\.sh`, mk)
	assert.Regexp(t, `(?m)^EXAMPLES\s*\?=[^\n]*\bexample-go\b`, mk, "make examples runs the Go example")
	assert.Regexp(t, `(?m)^EXAMPLES\s*\?=[^\n]*\bexample-ts\b`, mk, "make examples runs the TypeScript example")
	assert.Regexp(t, `(?m)^example-go:\n(\t[^\n]*\n)*\t[^\n]*\$\(GO\) run \./examples/go/sendmany\b`, mk)
	run := read("examples/run-against-dev.sh")
	assert.Contains(t, run, "./bin/emulator -server bin/server", "the stack make dev runs")
	assert.Contains(t, run, `sent=$N confirmed=$N failed=0 stuck=0`, "the summary it checks")
	assert.Regexp(t, `(?m)^trap stop_stack EXIT$`, run, "the stack is stopped however the run ends")
}
