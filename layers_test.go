package redlock

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The layers: each internal package imports only what CONTRIBUTING.md's map
// allows (nothing of the root's, which Go would refuse as a cycle anyway,
// and no other mechanism: the transport knows nothing of scripts or
// waiters), and the root files stay readable (at most 400 lines each).
func TestLayers(t *testing.T) {
	const mod = "github.com/go-redlock/redlock/"
	allowed := map[string][]string{
		"internal/lane":   {"github.com/redis/go-redis/v9", mod + "internal/flight"},
		"internal/wake":   {"github.com/redis/go-redis/v9", mod + "internal/flight"},
		"internal/script": nil,
		"internal/slot":   nil,
		"internal/flight": nil,
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
	roots, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range roots {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.LessOrEqual(t, strings.Count(string(b), "\n"), 400, "%s: a root file of more than 400 lines", f)
	}
}
