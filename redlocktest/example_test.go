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

// Nodes for a program's code, given to it as the program gets them. In a
// test function, nodes := redlocktest.New(t, 3) starts them and stops them
// when the test ends.
func ExampleStart() {
	nodes, err := redlocktest.Start(3)
	if err != nil {
		log.Fatal(err)
	}
	defer nodes.Close()

	// What the program does with redlock.Open(os.Getenv("REDLOCK_NODES")).
	rl, err := redlock.Open(nodes.List())
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close() // runs before nodes.Close

	ctx := context.Background()
	lock, err := rl.Acquire(ctx, []string{"invoice:42"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", lock.Valid())
	_, err = lock.Release(ctx)
	fmt.Println("released:", err == nil)
	// Output:
	// held: true
	// released: true
}

// A crashed node: a lock is still taken on the quorum of the other two;
// with two of three down it cannot be, and the error is not
// ErrResourceLocked (nobody else holds it).
func ExampleNodes_Down() {
	nodes, err := redlocktest.Start(3)
	if err != nil {
		log.Fatal(err)
	}
	defer nodes.Close()
	rl, err := redlock.Open(nodes.List())
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	nodes.Down(2)
	lock, err := rl.Acquire(ctx, []string{"invoice:42"}, 10*time.Second)
	fmt.Println("acquired with node 2 down:", err == nil)
	if err == nil {
		_, _ = lock.Release(ctx)
	}

	nodes.Down(1)
	_, err = rl.Acquire(ctx, []string{"invoice:43"}, 10*time.Second, redlock.WithRetryCount(0))
	fmt.Println("acquired with nodes 1 and 2 down:", err == nil)
	fmt.Println("resource locked:", errors.Is(err, redlock.ErrResourceLocked))

	nodes.Heal(1)
	nodes.Heal(2)
	// Output:
	// acquired with node 2 down: true
	// acquired with nodes 1 and 2 down: false
	// resource locked: false
}

// A hung node (paused, or cut off by a partition) takes the requests and
// never answers: the lock is taken on the other two without waiting for
// it, and only they vote for it.
func ExampleNodes_Hang() {
	nodes, err := redlocktest.Start(3)
	if err != nil {
		log.Fatal(err)
	}
	defer nodes.Close()
	rl, err := redlock.Open(nodes.List())
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	nodes.Hang(2)
	lock, err := rl.Acquire(ctx, []string{"invoice:42"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	last := lock.Attempts()[len(lock.Attempts())-1]
	fmt.Println("votes for:", len(last.VotesFor), "of", last.MembershipSize)
	_, err = lock.Release(ctx)
	fmt.Println("released:", err == nil)

	// Heal before rl.Close, which would wait for the calls parked on the
	// hung node (a second at most).
	nodes.Heal(2)
	// Output:
	// votes for: 2 of 3
	// released: true
}

// A node restarted without persistence forgets the lock; Using's next
// extension writes it there again, and the work goes on under the lock.
func ExampleNodes_Restart() {
	nodes, err := redlocktest.Start(3)
	if err != nil {
		log.Fatal(err)
	}
	defer nodes.Close()
	rl, err := redlock.Open(nodes.List())
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()

	// A 1s lock is extended 500ms before it expires (the default threshold).
	err = rl.Using(context.Background(), []string{"report:daily"}, time.Second, func(ctx context.Context) error {
		nodes.Restart(0)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Second): // an extension or two later
		}
		fmt.Println("still held after the restart:", ctx.Err() == nil)
		return nil
	})
	fmt.Println("Using:", err)
	// Output:
	// still held after the restart: true
	// Using: <nil>
}
