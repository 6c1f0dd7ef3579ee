package testsupport

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// SleepMarker starts the comment that says why a time.Sleep in a test is
// the thing under test (a lease that must run out, a fault held for a
// period) rather than a hope that something is done. It stands on the
// sleep's line or on the line above.
const SleepMarker = "sleep:"

// UnjustifiedSleeps lists, as "file:line", every use of time.Sleep in the
// Go source src (named filename) that has no SleepMarker comment on its
// line or the line above.
func UnjustifiedSleeps(filename string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timeNames := map[string]bool{}
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			name := "time"
			if imp.Name != nil {
				name = imp.Name.Name
			}
			timeNames[name] = true
		}
	}
	if len(timeNames) == 0 {
		return nil, nil
	}
	justified := map[int]bool{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			text := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(c.Text, "//"), "/*"))
			if i := strings.Index(text, SleepMarker); i >= 0 && strings.TrimSpace(strings.TrimSuffix(text[i+len(SleepMarker):], "*/")) != "" {
				line := fset.Position(c.Slash).Line
				justified[line], justified[line+1] = true, true
			}
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sleep" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && timeNames[id.Name] {
			if pos := fset.Position(sel.Pos()); !justified[pos.Line] {
				out = append(out, fmt.Sprintf("%s:%d", filename, pos.Line))
			}
		}
		return true
	})
	return out, nil
}

// IsTestSupport reports whether dir (slash-separated, relative to the module
// root) is a package of test helpers, whose every file is held to the same
// rule as tests.
func IsTestSupport(dir string) bool {
	base := filepath.Base(dir)
	return base == "testsupport" || (strings.HasSuffix(base, "test") && base != "test")
}

// SleepScope lists the files under root that the rule covers: every
// *_test.go file, and every Go file of a test-support package.
func SleepScope(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, "_test.go") || IsTestSupport(filepath.ToSlash(filepath.Dir(rel))) {
			files = append(files, p)
		}
		return nil
	})
	return files, err
}
