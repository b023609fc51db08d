// Command docstats counts the doc comments of a package's exported
// declarations: how many, their average length in lines, the longest, and
// those over a limit.
//
//	go run ./tools/docstats [-over 20] [dir]   (from the repository root; dir: .)
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
)

type doc struct {
	name  string
	lines int
}

func main() {
	over := flag.Int("over", 20, "list the doc comments longer than this many lines")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var docs []doc
	add := func(name string, g *ast.CommentGroup) {
		n := 0
		if g != nil {
			n = len(g.List)
			if n == 1 && strings.HasPrefix(g.List[0].Text, "/*") {
				n = strings.Count(g.List[0].Text, "\n") + 1
			}
		}
		docs = append(docs, doc{name, n})
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					name := d.Name.Name
					if d.Recv != nil {
						t := d.Recv.List[0].Type
						if s, ok := t.(*ast.StarExpr); ok {
							t = s.X
						}
						if id, ok := t.(*ast.Ident); ok {
							if !id.IsExported() {
								continue
							}
							name = id.Name + "." + name
						}
					}
					add(name, d.Doc)
				case *ast.GenDecl:
					for _, s := range d.Specs {
						g := d.Doc
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							if s.Doc != nil {
								g = s.Doc
							}
							add(s.Name.Name, g)
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if !n.IsExported() {
									continue
								}
								if s.Doc != nil {
									g = s.Doc
								}
								add(n.Name, g)
								break // a group's doc counts once per spec
							}
						}
					}
				}
			}
		}
	}
	sort.Slice(docs, func(i, j int) bool { return docs[i].lines > docs[j].lines })
	total := 0
	for _, d := range docs {
		total += d.lines
	}
	if len(docs) == 0 {
		fmt.Println("no exported declarations")
		return
	}
	fmt.Printf("%d exported declarations, %d doc lines, average %.1f, longest %d (%s)\n",
		len(docs), total, float64(total)/float64(len(docs)), docs[0].lines, docs[0].name)
	for _, d := range docs {
		if d.lines > *over {
			fmt.Printf("  %3d %s\n", d.lines, d.name)
		}
	}
}
