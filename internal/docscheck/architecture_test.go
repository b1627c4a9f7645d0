package docscheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// modulePackages maps each package of the module (its path inside the
// module, "ledger/pgstore") to the module packages it imports, from go
// list.
func modulePackages(t *testing.T, root string) (string, map[string][]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	mod, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	prefix := strings.TrimSpace(string(mod)) + "/"
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var imports []string
		for _, imp := range f[1:] {
			if p, ok := strings.CutPrefix(imp, prefix); ok {
				imports = append(imports, p)
			}
		}
		pkgs[strings.TrimPrefix(f[0], prefix)] = imports
	}
	return prefix, pkgs
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// tableRows returns the cells of the rows of the first table under the
// heading "## "+heading in doc, header and separator left out.
func tableRows(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/architecture.md has no section %q", heading)
	}
	if i := strings.Index(after, "\n## "); i >= 0 {
		after = after[:i]
	}
	var rows [][]string
	for line := range strings.Lines(after) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("section %q of docs/architecture.md has no table", heading)
	}
	return rows[1:] // the header
}

func spans(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestArchitectureMapsEveryPackageAndDependency: docs/architecture.md's
// package table names every package of the module, and only those; for
// each row, the module packages it says the row depends on are exactly
// those its packages import (go list), leaving out internal/ packages,
// which may go unsaid; its table of ledger/ names every file there once;
// and every file path it shows exists. So the map cannot drift from the
// code: a package, import or file added or moved fails here.
func TestArchitectureMapsEveryPackageAndDependency(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, pkgs := modulePackages(t, root)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; the listing is broken", len(pkgs))
	}

	named := map[string]bool{}
	for _, row := range tableRows(t, doc, "Packages") {
		if len(row) != 3 {
			t.Errorf("package row %q: want 3 cells, got %d", row[0], len(row))
			continue
		}
		var rowPkgs []string
		for _, p := range spans(row[0]) {
			p = strings.TrimSuffix(p, "/")
			if _, ok := pkgs[p]; !ok {
				if fi, err := os.Stat(filepath.Join(root, p)); err == nil && fi.IsDir() && !hasGo(filepath.Join(root, p)) {
					continue // a directory of another language (interop/)
				}
				t.Errorf("docs/architecture.md names package %s, which does not exist", p)
				continue
			}
			if named[p] {
				t.Errorf("docs/architecture.md names package %s twice", p)
			}
			named[p] = true
			rowPkgs = append(rowPkgs, p)
		}
		if strings.Contains(row[2], "everything") {
			continue // cmd/ratchet: everything below
		}
		var stated []string
		for _, d := range spans(row[2]) {
			if _, ok := pkgs[d]; ok && !slices.Contains(stated, d) {
				stated = append(stated, d)
			}
		}
		var actual []string
		for _, p := range rowPkgs {
			for _, imp := range pkgs[p] {
				if !slices.Contains(actual, imp) && !slices.Contains(rowPkgs, imp) {
					actual = append(actual, imp)
				}
			}
		}
		for _, d := range stated {
			if !slices.Contains(actual, d) {
				t.Errorf("docs/architecture.md says %s depends on %s; it does not import it", strings.Join(rowPkgs, ", "), d)
			}
		}
		for _, d := range actual {
			if !slices.Contains(stated, d) && !strings.HasPrefix(d, "internal/") {
				t.Errorf("%s imports %s; docs/architecture.md does not say so", strings.Join(rowPkgs, ", "), d)
			}
		}
	}
	for p := range pkgs {
		if !named[p] {
			t.Errorf("package %s is not in docs/architecture.md's package table", p)
		}
	}

	listed := map[string]bool{}
	for _, row := range tableRows(t, doc, "Inside `ledger/` (by the data it keeps)") {
		for _, f := range spans(row[0]) {
			if listed[f] {
				t.Errorf("docs/architecture.md lists ledger/%s twice", f)
			}
			listed[f] = true
		}
	}
	files, err := filepath.Glob(filepath.Join(root, "ledger", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		if !listed[name] {
			t.Errorf("ledger/%s is not in docs/architecture.md's table of ledger/", name)
		}
		delete(listed, name)
	}
	for f := range listed {
		t.Errorf("docs/architecture.md lists ledger/%s, which does not exist", f)
	}

	for _, s := range spans(doc) {
		if !filePath.MatchString(s) {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, s)); err != nil {
			t.Errorf("docs/architecture.md shows %s, which does not exist", s)
		}
	}
}

// filePath matches a code span that is a path to a Go file in the module
// ("proxy/gate.go"), not a bare file name, which the tables resolve.
var filePath = regexp.MustCompile(`^[a-z][a-z0-9_]*(/[a-z0-9_.]+)*/[a-z0-9_]+\.go$`)

func hasGo(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	return len(m) > 0
}
