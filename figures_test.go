package redlock_test

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateFigures = flag.Bool("figures.update", false, "rewrite the figures quoted outside their sources from the sources")

// figureSources hold every measured figure. Another document quotes one
// only inside a block copied from its source:
//
//	<!-- figures: NAME (copied from benchmarks/README.md ...) -->
//	...
//	<!-- /figures -->
//
// and the source has the same block, with the same NAME.
var figureSources = []string{"benchmarks/README.md", "RELIABILITY.md"}

// figureQuoters are the documents a newcomer reads first: they quote
// figures only in copied blocks, and hold no other measurement.
var figureQuoters = []string{"README.md", "doc.go", "cmd/redlock/README.md", "CONTRIBUTING.md", "redlockotel/otel.go"}

var figureBlock = regexp.MustCompile(`(?s)<!-- figures: ([a-z0-9-]+)[^>]*-->\n(.*?)<!-- /figures -->`)

// A measurement: a rate, a latency with its unit apart ("5 ms"), a
// percentile, an allocation count, a size or a share.
var measurement = regexp.MustCompile(`\b\d[\d,.]*\s?(ops/s|hand-offs/s|grants/s|µs|allocs|KB|MB)\b|\b\d[\d,.]* ms\b|\bp99\b|\b\d[\d.]* ?%([\s),.;]|$)`)

// Figures live in one place: every block of figures quoted in README.md
// (and the other documents a newcomer reads) is a copy of the block of the
// same name in benchmarks/README.md or RELIABILITY.md, and outside those
// blocks those documents hold no measurement. With -figures.update the
// quotes are rewritten from their sources (the generator).
func TestFiguresMatchTheirSource(t *testing.T) {
	t.Parallel()
	sources := map[string]string{}
	for _, f := range figureSources {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range figureBlock.FindAllStringSubmatch(string(b), -1) {
			_, dup := sources[m[1]]
			require.False(t, dup, "figures %q have two sources", m[1])
			sources[m[1]] = m[2]
		}
	}
	quoted := 0
	for _, f := range figureQuoters {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := string(b)
		updated := figureBlock.ReplaceAllStringFunc(text, func(block string) string {
			m := figureBlock.FindStringSubmatch(block)
			src, ok := sources[m[1]]
			if !assert.True(t, ok, "%s quotes figures %q, which no source (%v) has", f, m[1], figureSources) {
				return block
			}
			quoted++
			if m[2] != src && !*updateFigures {
				t.Errorf("%s quotes figures %q that differ from their source: run go test -run TestFiguresMatchTheirSource -figures.update .\nquoted:\n%s\nsource:\n%s", f, m[1], m[2], src)
			}
			return strings.Replace(block, m[2], src, 1)
		})
		if *updateFigures && updated != text {
			require.NoError(t, os.WriteFile(f, []byte(updated), 0o644))
		}
		outside := figureBlock.ReplaceAllString(updated, "")
		for _, line := range strings.Split(outside, "\n") {
			if m := measurement.FindString(line); m != "" {
				t.Errorf("%s holds a measurement (%q) outside a block of figures: move it to %v and quote the block:\n%s", f, m, figureSources, line)
			}
		}
	}
	assert.Positive(t, quoted, "README.md quotes no figures: its performance table is a copied block")
}

// The drawing's figures in CONTRIBUTING.md (the last row of its table) are
// what tools/depgraph counts today, in the order CONTRIBUTING gives.
func TestDrawingFiguresMatchTheTool(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds tools/depgraph")
	}
	doc, err := os.ReadFile("CONTRIBUTING.md")
	require.NoError(t, err)
	order := regexp.MustCompile(`-order \\\n\s+(\S+) \.`).FindStringSubmatch(string(doc))
	require.NotNil(t, order, "CONTRIBUTING.md gives the drawing's order after -order")
	bin := filepath.Join(t.TempDir(), "depgraph")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "tools/depgraph"
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "-order", order[1], ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	counts := regexp.MustCompile(`(\d+) files, (\d+) arrows between files`).FindStringSubmatch(string(out))
	back := regexp.MustCompile(`running back up the order given: (\d+)`).FindStringSubmatch(string(out))
	require.NotNil(t, counts, "%s", out)
	require.NotNil(t, back, "%s", out)
	rows := regexp.MustCompile(`(?m)^\| [^|]+ \| (\d+) \| (\d+) \| (\d+) \|`).FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, rows, "CONTRIBUTING.md's table of the drawing")
	last := rows[len(rows)-1]
	assert.Equal(t, []string{counts[1], counts[2], back[1]}, last[1:4],
		"CONTRIBUTING.md's last row (files, arrows, back up) against tools/depgraph's count:\n%s", out)
	assert.Contains(t, string(doc), "The "+back[1]+" left are", "CONTRIBUTING.md names how many arrows run back up")
}
