package api

import (
	"encoding/json"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frontEnd are the answers the load balancer's Cloud Armor policy
// (terraform/lb.tf) gives before a request reaches the API: 429 to a
// client over its rate, 403 to a source outside api_allowed_cidrs. Every
// operation can meet them; the guard gives both too.
var frontEnd = map[int]string{429: `exceed_action  = "deny(429)"`, 403: `"deny(403)"`}

// TestIssue46_OpenAPIAnswers: every operation of the OpenAPI document lists
// exactly the statuses its route can answer. What a route can answer is
// read from this package's source, not listed by hand: the statuses its
// handler writes (writeJSON, WriteHeader) and the problem types it and the
// functions it calls build (problemType.problem; problemFor's every case),
// the guard's answers when the route needs a role (routes' access), the
// answers of the deployed entry point (Serve), and the load balancer's.
func TestIssue46_OpenAPIAnswers(t *testing.T) {
	t.Parallel()
	src := parseAnswers(t)

	lb, err := os.ReadFile(filepath.Join("..", "..", "terraform", "lb.tf"))
	require.NoError(t, err)
	for status, rule := range frontEnd {
		require.Contains(t, string(lb), rule, "the load balancer answers %d", status)
	}

	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openapiDoc, &doc))

	serve := src.answers("Serve")
	guard := src.answers("guard")
	for _, rt := range routes {
		name := rt.method + " " + rt.path
		can := map[int]bool{}
		for s := range frontEnd {
			can[s] = true
		}
		for _, s := range serve {
			can[s] = true
		}
		if len(rt.access.roles) > 0 {
			for _, s := range guard {
				can[s] = true
			}
		}
		for _, s := range src.answers(handlerName(t, rt.handle)) {
			can[s] = true
		}

		t.Logf("%s: %v", name, sortedKeys(can))
		op, ok := doc.Paths[rt.path][strings.ToLower(rt.method)]
		if !assert.True(t, ok, "%s is in the document", name) {
			continue
		}
		listed := map[int]bool{}
		for code := range op.Responses {
			n, err := strconv.Atoi(code)
			if assert.NoError(t, err, "%s lists %q: only numeric statuses", name, code) {
				listed[n] = true
			}
		}
		for s := range can {
			assert.True(t, listed[s], "%s can answer %d, which the document does not list", name, s)
		}
		for s := range listed {
			assert.True(t, can[s], "%s lists %d, which the route never answers", name, s)
		}
	}
}

// handlerName is the name of the function declared in this package that
// serves a route: the method of (*Handler).create, or the function whose
// closure actionRoute(...) returns (named actionRoute.func1, or
// init.actionRoute.func1 where the compiler inlined it).
func handlerName(t *testing.T, fn any) string {
	t.Helper()
	full := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	_, name, _ := strings.Cut(full[strings.LastIndex(full, "/")+1:], ".")
	name = strings.TrimSuffix(name, "-fm")
	if strings.HasPrefix(name, "(") { // a method: (*Handler).create
		_, name, _ = strings.Cut(name, ").")
		return name
	}
	parts := strings.Split(name, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		if _, err := strconv.Atoi(strings.TrimPrefix(parts[i], "func")); err != nil {
			return parts[i]
		}
	}
	t.Fatalf("no function in %s", full)
	return ""
}

// answerSource is this package's code, read for the statuses it answers.
type answerSource struct {
	t     *testing.T
	funcs map[string][]*ast.FuncDecl // functions and methods, by name
	// probs are the problem types' statuses, by variable name.
	probs map[string]int
	// http are net/http's Status constants.
	http map[string]int
	memo map[string][]int
}

// parseAnswers reads the package's non-test files and net/http's status
// codes.
func parseAnswers(t *testing.T) *answerSource {
	t.Helper()
	s := &answerSource{t: t, funcs: map[string][]*ast.FuncDecl{}, probs: map[string]int{}, http: map[string]int{}, memo: map[string][]int{}}
	fset := token.NewFileSet()

	pkg, err := build.Import("net/http", "", build.FindOnly)
	require.NoError(t, err)
	f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, "status.go"), nil, 0)
	require.NoError(t, err)
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok && len(v.Values) == len(v.Names) {
			for i, name := range v.Names {
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.INT && strings.HasPrefix(name.Name, "Status") {
					s.http[name.Name], _ = strconv.Atoi(lit.Value)
				}
			}
		}
		return true
	})
	require.Equal(t, 422, s.http["StatusUnprocessableEntity"])

	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				s.funcs[d.Name.Name] = append(s.funcs[d.Name.Name], d)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					v, ok := spec.(*ast.ValueSpec)
					if !ok {
						continue
					}
					for i, name := range v.Names {
						if i >= len(v.Values) {
							break
						}
						lit, ok := v.Values[i].(*ast.CompositeLit)
						if !ok || len(lit.Elts) != 3 {
							continue
						}
						if typ, ok := lit.Type.(*ast.Ident); ok && typ.Name == "problemType" {
							s.probs[name.Name] = s.status(lit.Elts[2])
						}
					}
				}
			}
		}
	}
	// Every problem type the package lists was found, with its status.
	for _, k := range problemTypes {
		found := false
		for _, st := range s.probs {
			found = found || st == k.status
		}
		assert.True(t, found, "problem type %s is declared as problemType{slug, title, http.Status...}", k.slug)
	}
	require.Len(t, s.probs, len(problemTypes), "every problemType variable is in problemTypes")
	return s
}

// status is the value of an http.StatusX expression.
func (s *answerSource) status(e ast.Expr) int {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return 0
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "http" {
		return 0
	}
	code, ok := s.http[sel.Sel.Name]
	require.True(s.t, ok, "unknown http.%s", sel.Sel.Name)
	return code
}

// answers are the statuses the function or method name, and whatever of
// this package it calls, can write, sorted.
func (s *answerSource) answers(name string) []int {
	if got, ok := s.memo[name]; ok {
		return got
	}
	decls, ok := s.funcs[name]
	require.True(s.t, ok, "no function %s in the package", name)
	s.memo[name] = nil // a call cycle adds nothing
	found := map[int]bool{}
	add := func(code int) {
		if code != 0 {
			found[code] = true
		}
	}
	for _, d := range decls {
		writers := responseWriters(d)
		ast.Inspect(d.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Write" {
				if x, ok := sel.X.(*ast.Ident); ok && writers[x.Name] {
					add(s.http["StatusOK"]) // a body written without a status is 200
				}
			}
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				switch {
				case fn.Name == "writeJSON" && len(call.Args) == 3:
					add(s.status(call.Args[1]))
				case s.funcs[fn.Name] != nil:
					for _, c := range s.answers(fn.Name) {
						add(c)
					}
				}
			case *ast.SelectorExpr:
				if x, ok := fn.X.(*ast.Ident); ok {
					if st, isProb := s.probs[x.Name]; isProb && fn.Sel.Name == "problem" {
						add(st)
						return true
					}
					if x.Name == "http" && fn.Sel.Name == "Error" && len(call.Args) == 3 {
						add(s.status(call.Args[2]))
						return true
					}
				}
				switch {
				case fn.Sel.Name == "WriteHeader" && len(call.Args) == 1:
					add(s.status(call.Args[0]))
				case fn.Sel.Name != "problem" && s.funcs[fn.Sel.Name] != nil:
					for _, c := range s.answers(fn.Sel.Name) {
						add(c)
					}
				}
			}
			return true
		})
	}
	var out []int
	for c := range found {
		out = append(out, c)
	}
	slices.Sort(out)
	s.memo[name] = out
	return out
}

// responseWriters are the names of d's http.ResponseWriter parameters, its
// own and its closures'.
func responseWriters(d *ast.FuncDecl) map[string]bool {
	names := map[string]bool{}
	ast.Inspect(d, func(n ast.Node) bool {
		ft, ok := n.(*ast.FuncType)
		if !ok || ft.Params == nil {
			return true
		}
		for _, f := range ft.Params.List {
			if sel, ok := f.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "ResponseWriter" {
				for _, n := range f.Names {
					names[n.Name] = true
				}
			}
		}
		return true
	})
	return names
}

// TestIssue46_OpenAPIAnswersSees: the reading of the source finds what
// each kind of answer writes (so that the comparison above cannot pass by
// finding nothing).
func TestIssue46_OpenAPIAnswersSees(t *testing.T) {
	t.Parallel()
	src := parseAnswers(t)
	for name, want := range map[string][]int{
		"guard":           {401, 403, 429, 503}, // unauthenticated, refused, rate limited, unavailable
		"badRequest":      {400},
		"problemFor":      {403, 404, 422, 429, 500, 503},
		"unauthenticated": {401},
		"me":              {200},
		"openapi":         {200},
		"Serve":           {503},
		"create":          {200, 202, 400, 403, 404, 409, 413, 415, 422, 429, 500, 503},
	} {
		assert.Equal(t, want, src.answers(name), name)
	}
	assert.Equal(t, "create", handlerName(t, (*Handler).create))
	assert.Equal(t, "actionRoute", handlerName(t, actionRoute("cancel")))
}

func sortedKeys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
