// Command quickstart shows redlock's Acquire, Extend and Release, and what
// contention looks like, on three Redis nodes.
//
//	go run ./examples/quickstart                       # three embedded nodes
//	go run ./examples/quickstart -addrs 127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381
//
// Without -addrs it starts three in-process miniredis nodes, so it runs on a
// machine with no Redis at all.
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
	rl, err := redlock.Open(list)
	if err != nil {
		return err
	}
	defer rl.Close()
	ctx := context.Background()
	resources := []string{"quickstart:report"}

	lock, err := rl.Acquire(ctx, resources, 5*time.Second)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	// The votes of the attempt that won: Acquire returns as soon as a
	// quorum voted for, so a node that answers later is not counted here.
	won := lock.Attempts()[len(lock.Attempts())-1]
	fmt.Printf("acquired %v: %d of %d nodes had voted for it when Acquire returned (a quorum is %d), valid for %v\n",
		lock.Resources(), len(won.VotesFor), rl.Nodes(), rl.Quorum(), time.Until(lock.Expiration()).Round(time.Millisecond))

	// Someone else (here: the same process, with no retries) cannot have it.
	_, err = rl.Acquire(ctx, resources, 5*time.Second, redlock.WithRetryCount(0))
	fmt.Printf("a second acquire fails, as it should: errors.Is(err, redlock.ErrResourceLocked) = %v\n  %v\n", errors.Is(err, redlock.ErrResourceLocked), err)

	// Extending returns a new Lock; the old one is spent.
	lock, err = lock.Extend(ctx, 10*time.Second)
	if err != nil {
		return fmt.Errorf("extend: %w", err)
	}
	fmt.Printf("extended: valid for %v\n", time.Until(lock.Expiration()).Round(time.Millisecond))

	if _, err := lock.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	fmt.Println("released")

	again, err := rl.Acquire(ctx, resources, 5*time.Second, redlock.WithRetryCount(0))
	if err != nil {
		return fmt.Errorf("acquire after release: %w", err)
	}
	fmt.Println("acquired again after the release")
	_, err = again.Release(ctx)
	return err
}
