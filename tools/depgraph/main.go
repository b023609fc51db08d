// Command depgraph draws the arrows between the files of one Go package (A
// -> B when A uses something B declares, type-checked) and counts them: the
// arrows, those that run back up a given order of the files (-order), and
// the fewest that run back up in any order. CONTRIBUTING.md's drawing is
// its output for the root package, run from the package's directory (the
// type-checker finds its imports from the working directory's module):
//
//	(cd tools/depgraph && go build -o /tmp/depgraph .) && /tmp/depgraph -order using.go,redlock.go,... .
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

func main() {
	order := flag.String("order", "", "the files, top to bottom, comma-separated: count the arrows that run back up")
	list := flag.Bool("v", false, "list the arrows")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: depgraph [-v] [-order a.go,b.go,...] DIR")
		os.Exit(2)
	}
	edges, err := arrows(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "depgraph:", err)
		os.Exit(1)
	}
	files := map[string]bool{}
	for _, e := range edges {
		files[e[0]], files[e[1]] = true, true
	}
	if *list {
		for _, e := range edges {
			fmt.Println(e[0], "->", e[1])
		}
	}
	fmt.Printf("%d files, %d arrows between files, fewest running back up in any order: %d\n", len(files), len(edges), fewestBack(edges))
	if *order != "" {
		pos := map[string]int{}
		for i, f := range strings.Split(*order, ",") {
			pos[f] = i
		}
		back := 0
		for _, e := range edges {
			pa, ok1 := pos[e[0]]
			pb, ok2 := pos[e[1]]
			if !ok1 || !ok2 {
				fmt.Fprintf(os.Stderr, "depgraph: -order lacks %s or %s\n", e[0], e[1])
				os.Exit(2)
			}
			if pb < pa {
				back++
				if *list {
					fmt.Println("back up:", e[0], "->", e[1])
				}
			}
		}
		fmt.Printf("running back up the order given: %d\n", back)
	}
}

// arrows returns the file pairs (A, B), A using something B declares, of
// the package in dir (test files left out), sorted.
func arrows(dir string) ([][2]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return nil, err
	}
	if len(pkgs) != 1 {
		return nil, fmt.Errorf("%s holds %d packages", dir, len(pkgs))
	}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, err := conf.Check(files[0].Name.Name, fset, files, info)
	if err != nil {
		return nil, err
	}
	set := map[[2]string]bool{}
	add := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		a, b := filepath.Base(fset.Position(at).Filename), filepath.Base(fset.Position(obj.Pos()).Filename)
		if a != b {
			set[[2]string{a, b}] = true
		}
	}
	for id, obj := range info.Uses {
		add(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		add(sel.Pos(), s.Obj())
	}
	var out [][2]string
	for e := range set {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0]+" "+out[i][1] < out[j][0]+" "+out[j][1] })
	return out, nil
}

// fewestBack returns the fewest arrows that run back up in any order of the
// files (a minimum feedback arc set, by dynamic programming over the sets
// of files placed at the top: fine for a package's few dozen files at most
// 20 or so).
func fewestBack(edges [][2]string) int {
	var names []string
	for _, e := range edges {
		for _, f := range e {
			if !slices.Contains(names, f) {
				names = append(names, f)
			}
		}
	}
	n := len(names)
	if n > 22 {
		return -1
	}
	uses := make([]uint32, n) // uses[v]: the files v has an arrow to
	for _, e := range edges {
		uses[slices.Index(names, e[0])] |= 1 << slices.Index(names, e[1])
	}
	best := make([]int, 1<<n)
	for s := range best {
		best[s] = -1
	}
	best[0] = 0
	for s := 0; s < 1<<n; s++ {
		if best[s] < 0 {
			continue
		}
		for v := range n {
			if s>>v&1 == 1 {
				continue
			}
			// v goes just below the files of s: its arrows to them run back up.
			c := best[s] + bits.OnesCount32(uses[v]&uint32(s))
			if t := s | 1<<v; best[t] < 0 || c < best[t] {
				best[t] = c
			}
		}
	}
	return best[1<<n-1]
}
