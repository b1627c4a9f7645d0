package vendors_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// TestNoVendorNameIsSwitchedOnOutsideVendors: what Ratchet knows about a
// vendor lives in this package; an adapter (proxy, webhooks, recovery,
// config, serve) asks a vendor through an interface (Tagger, Recoverable,
// Upstreamer, KeyShaper) and compares no vendor's name or operation: no
// Go file outside vendors/ (tests aside) has a built-in vendor's name, or
// an operation of one (stripe.…), as a switch case or as an operand of ==
// or !=.
func TestNoVendorNameIsSwitchedOnOutsideVendors(t *testing.T) {
	names := map[string]bool{}
	for _, v := range all.List() {
		names[v.Name()] = true
	}
	isVendor := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return "", false
		}
		name, _, _ := strings.Cut(s, ".")
		return s, names[strings.ToLower(name)]
	}
	root, _ := filepath.Abs("..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "vendors" || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			var exprs []ast.Expr
			switch x := n.(type) {
			case *ast.CaseClause:
				exprs = x.List
			case *ast.BinaryExpr:
				if x.Op == token.EQL || x.Op == token.NEQ {
					exprs = []ast.Expr{x.X, x.Y}
				}
			}
			for _, e := range exprs {
				if s, ok := isVendor(e); ok {
					t.Errorf("%s: compares the vendor name %q: ask the vendor through an interface in package vendors instead", fset.Position(e.Pos()), s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d Go files checked under %s: the walk missed the repository", checked, root)
	}
}

// TestAdaptersDoNotImportOneAnother: webhooks and recovery share what
// they need of the proxy's (the attempt, the stored answer, the
// transport) through internal/outbound, not by importing the proxy.
func TestAdaptersDoNotImportOneAnother(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range []string{"../webhooks", "../recovery"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/ratchet-mcp/ratchet/proxy" {
					t.Errorf("%s imports the proxy", path)
				}
			}
		}
	}
}

// TestTheWebhooksAdapterImportsNoVendor: each vendor's receiver is in its
// own package (vendors.Receiver), so the webhooks adapter imports package
// vendors and no vendor's package.
func TestTheWebhooksAdapterImportsNoVendor(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("../webhooks/*.go")
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/ratchet-mcp/ratchet/vendors/") {
				t.Errorf("%s imports %s", path, p)
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("no files in ../webhooks")
	}
}
