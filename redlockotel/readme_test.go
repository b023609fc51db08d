package redlockotel_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The README's Go blocks that import this module compile and pass go vet
// against it.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("testdata", "readme-")
	if err != nil {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if dir, err = os.MkdirTemp("testdata", "readme-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.RemoveAll("testdata") })
	args := []string{"vet"}
	for i, b := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if !strings.Contains(b[1], `"github.com/go-redlock/redlock/redlockotel"`) {
			continue
		}
		pkg := filepath.Join(dir, "block"+strconv.Itoa(i+1))
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "./"+filepath.ToSlash(pkg))
	}
	if len(args) == 1 {
		// README.md (a tour since issue 34) shows redlockotel's use no more;
		// ExampleNew is its example.
		t.Skip("no README Go block imports redlockotel")
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
