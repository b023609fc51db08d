package redlock_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every Go block in README.md is a whole file that compiles and passes go
// vet against this module, and a block that holds a test passes it: each is written to a package of its own under
// testdata (which ./... patterns skip) and vetted there. Blocks that import
// redlockotel are vetted in that module (redlockotel/readme_test.go).
func TestReadmeGoBlocksCompile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 2 {
		t.Fatalf("found %d Go blocks in README.md; expected the first snippet and Using's", len(blocks))
	}
	dir, err := os.MkdirTemp("testdata", "readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	args := []string{"vet"}
	var tests []string
	for i, b := range blocks {
		src := b[1]
		if strings.Contains(src, `"github.com/go-redlock/redlock/redlockotel"`) {
			continue
		}
		if !strings.HasPrefix(src, "package ") {
			t.Errorf("README Go block %d does not start with a package clause: a block must be a whole file:\n%s", i+1, src)
			continue
		}
		// Each main package is a program of its own; the blocks of one
		// other package (a function and its test) are one package.
		name := strings.Fields(src)[1]
		pkg := filepath.Join(dir, name)
		if name == "main" {
			pkg = filepath.Join(dir, "block"+strconv.Itoa(i+1))
		}
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		file := "block" + strconv.Itoa(i+1) + ".go"
		if strings.Contains(src, "func Test") {
			// A test of the user's, as README shows it: it runs.
			file = "block" + strconv.Itoa(i+1) + "_test.go"
			tests = append(tests, "./"+filepath.ToSlash(pkg))
		}
		if err := os.WriteFile(filepath.Join(pkg, file), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(args, "./"+filepath.ToSlash(pkg)) {
			args = append(args, "./"+filepath.ToSlash(pkg))
		}
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if len(tests) == 0 {
		t.Fatal("README.md shows no test of a user's (the redlocktest section's)")
	}
	args = append([]string{"test", "-count=1"}, tests...)
	out, err = exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// README.md is read in ten minutes and the package doc in a few: at most
// 300 and 150 lines (issue 34). What they leave out is in the names' docs,
// RELIABILITY.md and benchmarks/README.md.
func TestReadmeAndPackageDocStayShort(t *testing.T) {
	t.Parallel()
	for f, most := range map[string]int{"README.md": 300, "doc.go": 150} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > most {
			t.Errorf("%s has %d lines; at most %d: move the detail to the names' docs, RELIABILITY.md or benchmarks/README.md", f, n, most)
		}
	}
}
