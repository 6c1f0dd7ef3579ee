package app

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestIssue46_AppDependsOnPorts holds shared/app to its package comment:
// the use cases depend on the ports of shared/txm, and no adapter, client
// or telemetry library is imported by its non-test files.
func TestIssue46_AppDependsOnPorts(t *testing.T) {
	forbidden := []string{
		"github.com/txfence/txfence/shared/metrics",
		"github.com/txfence/txfence/shared/postgres",
		"go.opentelemetry.io/otel",
		"github.com/jackc/pgx",
		"github.com/ethereum/go-ethereum/ethclient",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	read := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		read++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: use cases depend on the ports of shared/txm, adapters are injected", name, path)
				}
			}
		}
	}
	if read == 0 {
		t.Fatal("no source files read")
	}
}
