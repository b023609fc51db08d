package redlock

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The layers: each internal package imports only what CONTRIBUTING.md's map
// allows (nothing of the root's, which Go would refuse as a cycle anyway,
// and no other mechanism: the transport knows nothing of scripts or
// waiters). Root files are cut by topic, not by a line count (issue 44
// dropped the cap of 400 lines: it split one idea over files).
func TestLayers(t *testing.T) {
	t.Parallel()
	const mod = "github.com/go-redlock/redlock/"
	allowed := map[string][]string{
		"driver":          {"github.com/redis/go-redis/v9"},
		"internal/lane":   {"github.com/redis/go-redis/v9", mod + "driver", mod + "internal/flight", mod + "internal/pause", mod + "internal/slot"},
		"internal/pause":  nil,
		"internal/wake":   {mod + "driver", mod + "internal/flight"},
		"internal/script": {mod + "internal/slot"},
		"internal/slot":   nil,
		"internal/flight": nil,
		"internal/dial":   nil,
	}
	for dir, may := range allowed {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !strings.Contains(path, ".") { // the standard library
					continue
				}
				assert.Contains(t, may, path, "%s imports %s, which the map does not allow", f, path)
			}
		}
	}
}

// No build output is committed (an 11 MB cmd/redlock/redlock once was):
// no tracked file is an executable binary or larger than 1 MiB, and
// .gitignore keeps the commands' outputs out.
func TestNoBuildOutputsCommitted(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		fi, err := os.Stat(f)
		if err != nil || fi.IsDir() {
			continue // deleted in the work tree
		}
		assert.LessOrEqual(t, fi.Size(), int64(1<<20), "%s: a tracked file of %d bytes", f, fi.Size())
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.False(t, strings.HasPrefix(string(b), "\x7fELF"), "%s is a compiled binary", f)
	}
	ignore, err := os.ReadFile(".gitignore")
	require.NoError(t, err)
	for _, p := range []string{"/cmd/redlock/redlock", "/redlock"} {
		assert.Contains(t, string(ignore), p+"\n", ".gitignore keeps %s out", p)
	}
}

// The engine names no kind (issue 32): the retry loop, the vote collector
// and turning node answers into votes run a plan and call its kind's hooks
// (kind.go); every primitive lives in its own file. A word of a primitive
// in these files (code or comment) means a branch for it crept back in.
func TestEngineNamesNoKind(t *testing.T) {
	t.Parallel()
	engine := []string{"engine.go", "attempt.go"}
	banned := regexp.MustCompile(`(?i)fair|fenc|permit|semaphore|reader|shared lock|\bterms?\b|election|elected|plainKind|fencedKind|` +
		`semaphoreKind|sharedKind|fairKind|termKind|fairCall|fencedHooks|kindFor|writeBack|handedByNodes`)
	for _, f := range engine {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(src), "\n") {
			if m := banned.FindString(line); m != "" {
				t.Errorf("%s:%d names a kind (%q): %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
	// And the kinds are where the map says: one file each.
	for _, f := range []string{"kind.go", "fenced.go", "semaphore.go", "shared.go", "fair.go", "election.go"} {
		_, err := os.Stat(f)
		assert.NoError(t, err, "the kind file %s", f)
	}
}

// Every name of a key or channel on the nodes ("redlock:" and a word) is
// spelled in internal/script/keys.go alone: the scripts, the kinds, the
// checks of reserved namespaces and the tools take it from there.
func TestKeyNamesInOnePlace(t *testing.T) {
	t.Parallel()
	name := regexp.MustCompile(`^"redlock:[a-z]`)
	var found []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == filepath.Join("internal", "script", "keys.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && name.MatchString(lit.Value) {
				found = append(found, fset.Position(lit.Pos()).String()+": "+lit.Value)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, found, "key names spelled outside internal/script/keys.go")
}

// CONTRIBUTING's recipe for a new primitive lists every file a kind
// touches beside its own: each kind's names (its type, hooks, keys and
// markers) appear in no other file. A new kind whose names reach a file the
// recipe misses fails here: add the file to the recipe (or keep the kind
// out of it).
func TestNewKindRecipe(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("CONTRIBUTING.md")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(doc), "<!-- recipe -->")
	require.True(t, ok, "CONTRIBUTING.md marks its recipe with <!-- recipe -->")
	block, _, _ = strings.Cut(block, "<!-- /recipe -->")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z/]+\\.go)`").FindAllStringSubmatch(block, -1) {
		listed[m[1]] = true
		_, err := os.Stat(m[1])
		assert.NoError(t, err, "the recipe names %s", m[1])
	}
	// Each kind: its own files, and the names that are its alone.
	kinds := []struct {
		own   []string
		names string
	}{
		{[]string{"kind.go"}, `plainKind`},
		{[]string{"fenced.go"}, `fencedKind|fencedHooks|FencePrefix|fenceKey`},
		{[]string{"semaphore.go"}, `semaphoreKind|PermitPrefix|PermitKey|permitKey|PermitsMarker`},
		{[]string{"shared.go"}, `sharedKind|ReadersPrefix|readersKey|SharedMarker|SharedWriterWaits`},
		{[]string{"fair.go", "internal/script/fair.go"}, `fairKind|fairHooks|QueuePrefix|QueueLivePrefix|queueKey|queueLiveKey`},
		{[]string{"election.go"}, `termKind|LeaderPrefix|leaderKey|ElectionPrefix`},
	}
	own := map[string]bool{}
	for _, k := range kinds {
		for _, f := range k.own {
			own[f] = true // a kind may build on another (the term on the fenced lock)
		}
	}
	var files []string
	for _, glob := range []string{"*.go", "internal/*/*.go", "cmd/redlock/*.go"} {
		m, err := filepath.Glob(glob)
		require.NoError(t, err)
		files = append(files, m...)
	}
	for _, k := range kinds {
		names := regexp.MustCompile(`\b(` + k.names + `)\b`)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || own[f] || listed[f] {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			if m := names.Find(src); m != nil {
				t.Errorf("%s names %s, a kind's own, and CONTRIBUTING's recipe does not list it", f, m)
			}
		}
	}
}
