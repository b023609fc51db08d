// Command using shows redlock's Using: a routine that runs under a lock that
// is extended for as long as it runs, and whose context is cancelled the
// moment the lock is lost.
//
//	go run ./examples/using                       # three embedded nodes
//	go run ./examples/using -addrs a:6379,b:6379,c:6379
//
// It runs two jobs. The first outlives its ttl several times over and
// finishes under the lock. During the second, another client overwrites the
// lock's keys on every node; the job sees its context cancelled with
// ErrExtensionFailed as the cause and stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/examples/internal/demo"
)

func main() {
	addrs := flag.String("addrs", "", "comma-separated host:port of independent Redis nodes (default: 3 embedded nodes)")
	flag.Parse()
	if err := run(*addrs); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(addrList string) error {
	list, stop, err := demo.Nodes(addrList, 3)
	if err != nil {
		return err
	}
	defer stop()
	rl, err := redlock.Open(list, redlock.WithAutomaticExtensionThreshold(200*time.Millisecond))
	if err != nil {
		return err
	}
	defer rl.Close()
	ctx := context.Background()
	const ttl = 500 * time.Millisecond

	// Job 1: four times as long as the ttl; Using keeps the lock alive.
	err = rl.Using(ctx, []string{"using:job1"}, ttl, func(ctx context.Context) error {
		for step := 1; step <= 4; step++ {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(ttl):
				fmt.Printf("job 1: step %d of 4 done under the lock\n", step)
			}
		}
		return nil
	})
	fmt.Printf("job 1 finished: err=%v\n", err)

	// Job 2: an operator takes the lock back mid-way (redlock release
	// using:job2, from a shell): Using's next extension finds it gone.
	err = rl.Using(ctx, []string{"using:job2"}, ttl, func(ctx context.Context) error {
		// A node that did not answer makes it an error, though a quorum
		// of the nodes gave the lock up: the holder loses it all the same.
		if err := rl.ForceRelease(ctx, "using:job2"); err != nil {
			fmt.Printf("job 2: force release: %v\n", err)
		}
		fmt.Println("job 2: an operator force-released the lock")
		select {
		case <-ctx.Done():
			fmt.Printf("job 2: stopped, cause: %v\n", context.Cause(ctx))
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("job 2 was never told that the lock was lost")
		}
	})
	fmt.Printf("job 2 finished: lost=%v\n", errors.Is(err, redlock.ErrExtensionFailed))
	if !errors.Is(err, redlock.ErrExtensionFailed) {
		return fmt.Errorf("job 2: %v", err)
	}
	return nil
}
