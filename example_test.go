package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// exampleNodes starts n in-process Redis nodes for the examples and returns
// clients for them and a function that stops everything.
func exampleNodes(n int) ([]redis.UniversalClient, func()) {
	var clients []redis.UniversalClient
	var stops []func()
	for range n {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			panic(err)
		}
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		clients = append(clients, c)
		stops = append(stops, func() { _ = c.Close(); mr.Close() })
	}
	return clients, func() {
		for _, s := range stops {
			s()
		}
	}
}

// Acquire a lock on three nodes, work under it, and release it.
func Example() {
	clients, stop := exampleNodes(3) // your redis.NewClient(...) per node
	defer stop()

	rl, err := redlock.New(clients)
	if err != nil {
		panic(err)
	}
	defer rl.Close() // waits for releases still on their way; the clients stay yours
	ctx := context.Background()
	lock, err := rl.Acquire(ctx, []string{"invoice:42"}, 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	fmt.Println("held:", lock.Valid(), lock.Resources())

	// ... the critical section, done before lock.Expiration() ...

	if _, err := lock.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	fmt.Println("held after release:", lock.Valid())
	// Output:
	// held: true [invoice:42]
	// held after release: false
}

// A try-lock: one attempt, and a contended resource is told apart from
// failing nodes with errors.Is.
func ExampleRedlock_Acquire_tryLock() {
	clients, stop := exampleNodes(3)
	defer stop()
	rl, _ := redlock.New(clients)
	defer rl.Close()
	ctx := context.Background()

	held, _ := rl.Acquire(ctx, []string{"job:nightly"}, time.Minute)
	defer held.Release(ctx)

	_, err := rl.Acquire(ctx, []string{"job:nightly"}, time.Minute, redlock.WithRetryCount(0))
	switch {
	case errors.Is(err, redlock.ErrResourceLocked):
		fmt.Println("someone else runs the job")
	case err != nil:
		fmt.Println("the lock service is unavailable:", err)
	}
	// Output:
	// someone else runs the job
}

// Extend returns a new Lock; the old handle can no longer be extended, but
// releasing through it (a deferred Release) releases the extension too.
func ExampleLock_Extend() {
	clients, stop := exampleNodes(3)
	defer stop()
	rl, _ := redlock.New(clients)
	defer rl.Close()
	ctx := context.Background()

	lock, _ := rl.Acquire(ctx, []string{"export:7"}, 2*time.Second)
	extended, err := lock.Extend(ctx, 30*time.Second)
	if err != nil {
		fmt.Println("lost the lock:", errors.Is(err, redlock.ErrLockExpired))
		return
	}
	fmt.Println("old handle valid:", lock.Valid())
	fmt.Println("new handle valid:", extended.Valid(), time.Until(extended.Expiration()) > 20*time.Second)
	if _, err := lock.Release(ctx); err != nil { // the first handle, as a deferred Release has it
		fmt.Println("release:", err)
	}
	fmt.Println("new handle valid after releasing through the old one:", extended.Valid())
	// Output:
	// old handle valid: false
	// new handle valid: true true
	// new handle valid after releasing through the old one: false
}

// Using runs a function under a lock that is extended while it runs; its
// context is cancelled if the lock is lost.
func ExampleRedlock_Using() {
	clients, stop := exampleNodes(3)
	defer stop()
	rl, _ := redlock.New(clients)
	defer rl.Close()

	err := rl.Using(context.Background(), []string{"report:monthly"}, 10*time.Second, func(ctx context.Context) error {
		// ... long work; check ctx between steps ...
		if ctx.Err() != nil {
			return context.Cause(ctx) // matches redlock.ErrExtensionFailed when the lock was lost
		}
		fmt.Println("report written under the lock")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// report written under the lock
	// err: <nil>
}

// Locks with fencing tokens: each holder of a resource gets a larger token
// than the one before, and passes it to the protected resource, which
// refuses a write whose token is below the highest it has seen.
func ExampleWithFencing() {
	clients, stop := exampleNodes(3)
	defer stop()

	rl, err := redlock.New(clients, redlock.WithFencing(true))
	if err != nil {
		panic(err)
	}
	defer rl.Close()
	ctx := context.Background()
	for range 2 {
		lock, err := rl.Acquire(ctx, []string{"invoice:42"}, 10*time.Second)
		if err != nil {
			fmt.Println("not acquired:", err)
			return
		}
		fmt.Println("token:", lock.Token())
		// db.ExecContext(ctx, "UPDATE invoices SET ..., fence = $1 WHERE id = 42 AND fence < $1", lock.Token())
		_, _ = lock.Release(ctx)
	}

	// Using gives fn the token in its context.
	_ = rl.Using(ctx, []string{"invoice:42"}, 10*time.Second, func(ctx context.Context) error {
		token, ok := redlock.TokenFrom(ctx)
		fmt.Println("token in fn:", token, ok)
		return nil
	})
	// Output:
	// token: 1
	// token: 2
	// token in fn: 3 true
}

// Eight goroutines of one process take turns on one lock: each Release
// while another waits hands the lock over with no round trip (the
// default; WithHandOver sets the bound, WithHandOver(0, 0) turns it off).
func ExampleWithHandOver() {
	clients, stop := exampleNodes(3)
	defer stop()

	rl, err := redlock.New(clients, redlock.WithHandOver(16, 100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer rl.Close()
	ctx := context.Background()
	var mu sync.Mutex
	sections, handedOver := 0, 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				lock, err := rl.Acquire(ctx, []string{"ledger"}, 10*time.Second, redlock.WithRetryCount(-1))
				if err != nil {
					panic(err)
				}
				time.Sleep(time.Millisecond) // the critical section
				res, err := lock.Release(ctx)
				if err != nil {
					panic(err)
				}
				mu.Lock()
				sections++
				if res.HandedOver {
					handedOver++ // passed to a waiting goroutine, nothing sent
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println("sections:", sections)
	// Output:
	// sections: 40
}

// Waiters in every process queue on the nodes and are served in the order
// they came: give the option to every Redlock that contends for the
// resource.
func ExampleWithFairQueue() {
	var clients []redis.UniversalClient // one per node, as for New
	rl, err := redlock.New(clients, redlock.WithFairQueue(true))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rl.Close()
	lock, err := rl.Acquire(context.Background(), []string{"report:daily"}, 30*time.Second, redlock.WithRetryCount(-1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(context.Background())
	// ... the report, while this process's turn lasts
}
