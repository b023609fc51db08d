package redlocktest_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"
)

// The package doc's test, as a user writes it; TestPackageDocShowsThisTest
// keeps the two the same.
func TestExportStopsWhenItsLockIsLost(t *testing.T) {
	nodes := redlocktest.New(t, 3) // stopped when the test ends
	// What main does with redlock.Open(os.Getenv("REDLOCK_NODES")). A short
	// threshold, so that a 300ms lock is extended, and its loss seen, early.
	rl, err := redlock.Open(nodes.List(), redlock.WithAutomaticExtensionThreshold(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rl.Close() }) // runs before the nodes stop

	nodes.Down(2) // a crashed node: 2 of 3 still make a quorum
	rows, calls := make([]string, 1000), 0
	write := func(string) error {
		calls++
		if calls == 2 { // the lock is taken away during the export
			if err := nodes.Lose("report:daily"); err != nil {
				return err
			}
		}
		time.Sleep(10 * time.Millisecond) // a slow write
		return nil
	}
	n, err := exportReport(context.Background(), rl, 300*time.Millisecond, rows, write)
	if n == len(rows) || !errors.Is(err, redlock.ErrExtensionFailed) {
		t.Errorf("exportReport = %d rows, %v; want it stopped early by the lost lock", n, err)
	}
}

// The code in the package doc is TestExportStopsWhenItsLockIsLost's.
func TestPackageDocShowsThisTest(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var block []string
	for _, line := range strings.Split(string(doc), "\n") {
		if code, ok := strings.CutPrefix(line, "//\t"); ok {
			block = append(block, code)
		} else if line == "//" && len(block) > 0 {
			block = append(block, "") // a blank line in the block, or its end
		} else if len(block) > 0 {
			break // the first block only
		}
	}
	for len(block) > 0 && block[len(block)-1] == "" {
		block = block[:len(block)-1]
	}
	src, err := os.ReadFile("doc_test.go")
	require.NoError(t, err)
	const start = "func TestExportStopsWhenItsLockIsLost"
	i := strings.Index(string(src), start)
	require.GreaterOrEqual(t, i, 0)
	end := strings.Index(string(src[i:]), "\n}\n")
	require.Greater(t, end, 0)
	assert.Equal(t, string(src[i:i+end+2]), strings.Join(block, "\n"), "doc.go's test and doc_test.go's")
}
