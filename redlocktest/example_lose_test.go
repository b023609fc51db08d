package redlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlocktest"
)

// exportReport is the code under test: it writes rows under a lock on
// "report:daily", so that two exporters never interleave their rows, and
// stops writing as soon as it may no longer hold the lock. It returns how
// many rows it wrote.
func exportReport(ctx context.Context, rl *redlock.Redlock, ttl time.Duration, rows []string, write func(row string) error) (int, error) {
	written := 0
	err := rl.Using(ctx, []string{"report:daily"}, ttl, func(ctx context.Context) error {
		for _, row := range rows {
			if ctx.Err() != nil {
				return context.Cause(ctx) // the lock is lost, or the caller gave up
			}
			if err := write(row); err != nil {
				return err
			}
			written++
		}
		return nil
	})
	return written, err
}

// A test of exportReport for the lost lock: the kit takes the lock away
// after the first row, and the export stops early with an error matching
// redlock.ErrExtensionFailed. In a test function, redlocktest.New(t, 3)
// replaces Start and the deferred Close.
func ExampleNodes_Lose() {
	nodes, err := redlocktest.Start(3)
	if err != nil {
		log.Fatal(err)
	}
	defer nodes.Close()
	// A short threshold, so that a 300ms lock is extended, and its loss
	// seen, early.
	rl, err := redlock.Open(nodes.List(), redlock.WithAutomaticExtensionThreshold(150*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close() // runs before nodes.Close

	rows, calls := make([]string, 1000), 0
	write := func(string) error {
		calls++
		if calls == 2 {
			// Another process takes the lock: an operator's force release,
			// or this one paused past its ttl.
			if err := nodes.Lose("report:daily"); err != nil {
				return err
			}
		}
		time.Sleep(10 * time.Millisecond) // a slow write
		return nil
	}
	written, err := exportReport(context.Background(), rl, 300*time.Millisecond, rows, write)
	fmt.Println("wrote the rows before the loss:", written >= 2)
	fmt.Println("stopped early:", written < len(rows))
	fmt.Println("lock lost:", errors.Is(err, redlock.ErrExtensionFailed))
	// Output:
	// wrote the rows before the loss: true
	// stopped early: true
	// lock lost: true
}
