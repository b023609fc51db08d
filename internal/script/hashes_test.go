package script

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/redistest"
)

const regenerate = "run go generate ./internal/script"

// Every script's hash is the SHA-1 of its source as it is now: a source
// edited without running go generate fails here. Under GODEBUG=fips140=only
// the SHA-1 cannot be computed; the hashes are then only checked to be
// there.
func TestHashes(t *testing.T) {
	hexSHA1 := regexp.MustCompile(`^[0-9a-f]{40}$`)
	sources := map[string]bool{}
	var missing, stale []string
	for name, s := range generated {
		sources[s.Src] = true
		if !hexSHA1.MatchString(s.Hash) {
			missing = append(missing, name)
			continue
		}
		if fips140.Enabled() {
			continue
		}
		if sum := sha1.Sum([]byte(s.Src)); hex.EncodeToString(sum[:]) != s.Hash {
			stale = append(stale, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	assert.Empty(t, missing, "no hash in hashes_gen.go for these scripts' sources (changed since it was generated): %s", regenerate)
	assert.Empty(t, stale, "these scripts' Hash is not the SHA-1 of their Src: %s", regenerate)
	assert.Len(t, hashes, len(sources), "hashes_gen.go holds sources that no script has: %s", regenerate)
	if fips140.Enabled() {
		t.Skip("GODEBUG=fips140: SHA-1 not computed; the hashes were only checked to be there")
	}
}

// Every script's hash is the one a real node gives its source (SCRIPT
// LOAD): the check of TestHashes made by the server, so that it runs under
// GODEBUG=fips140=only too, where this process may not compute a SHA-1.
func TestHashesOnANode(t *testing.T) {
	c := redistest.StartNode(t).Client()
	ctx := context.Background()
	names := make([]string, 0, len(generated))
	for name := range generated {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := generated[name]
		sha, err := c.ScriptLoad(ctx, s.Src).Result()
		require.NoError(t, err, "SCRIPT LOAD of %s", name)
		assert.Equal(t, sha, s.Hash, "SCRIPT LOAD of %s answered %s; its Hash is %q: %s", name, sha, s.Hash, regenerate)
	}
}

// Every *Script the package declares is one go generate wrote a hash for:
// a script added without running go generate fails here.
func TestEveryScriptIsGenerated(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var declared []string
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") || p == "hashes_gen.go" {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					if makesScript(v) {
						declared = append(declared, vs.Names[i].Name)
					}
				}
			}
		}
	}
	var have []string
	for name := range generated {
		have = append(have, name)
	}
	sort.Strings(declared)
	sort.Strings(have)
	require.NotEmpty(t, declared, "found no script declared in %v", paths)
	assert.Equal(t, declared, have, "the scripts declared (newScript or &Script{...}) and those in hashes_gen_test.go differ: %s", regenerate)
}

// makesScript reports whether e is newScript(...) or a Script literal
// (with or without &).
func makesScript(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.CallExpr:
		id, ok := v.Fun.(*ast.Ident)
		return ok && id.Name == "newScript"
	case *ast.UnaryExpr:
		return v.Op == token.AND && makesScript(v.X)
	case *ast.CompositeLit:
		id, ok := v.Type.(*ast.Ident)
		return ok && id.Name == "Script"
	}
	return false
}
