package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

// The Examples get their nodes as a program does, from the environment:
// REDLOCK_NODES, a comma-separated list such as
// 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379. (In this package's tests,
// TestMain starts three in-memory nodes and sets it to theirs.)
//
// For the maintainers: go test runs each Example once per process (-count
// and -shuffle leave Examples alone), in the order of the files, on the
// fresh nodes of TestMain. Each Example uses resources and elections that no
// other uses, and releases what it takes, so that what it prints (a fencing
// token or a term that starts at 1) does not depend on the others.

// Acquire a lock on three nodes, work under it, and release it.
func Example() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES")) // such as 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close() // waits for releases still on their way, then closes Open's clients
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

// Open makes a client per node of a node list, and its Close closes them.
func ExampleOpen() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES")) // such as 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
	if err != nil {
		log.Fatal(err) // an empty list, an entry that does not parse, a server given twice
	}
	defer rl.Close()
	fmt.Println("nodes:", rl.Nodes(), "quorum:", rl.Quorum())

	ctx := context.Background()
	lock, err := rl.Acquire(ctx, []string{"open:report"}, 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Release(ctx)
	fmt.Println("held:", lock.Valid())
	// Output:
	// nodes: 3 quorum: 2
	// held: true
}

// New takes clients that you make, one per independent node: here from a
// node list, with the settings that ParseNodes gives each (a client of your
// own, a Cluster's or a Sentinel group's, counts as one node too).
func ExampleNew() {
	nodes, err := redlock.ParseNodes(os.Getenv("REDLOCK_NODES")) // such as 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
	if err != nil {
		log.Fatal(err)
	}
	var clients []redis.UniversalClient
	for _, o := range nodes {
		c := redis.NewClient(o)
		defer c.Close() // New does not close the clients: they stay yours
		clients = append(clients, c)
	}
	rl, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close() // runs first: sends the releases still on their way, then the clients close
	fmt.Println("nodes:", rl.Nodes(), "quorum:", rl.Quorum())

	ctx := context.Background()
	lock, err := rl.Acquire(ctx, []string{"new:report"}, 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Release(ctx)
	fmt.Println("held:", lock.Valid())
	// Output:
	// nodes: 3 quorum: 2
	// held: true
}

// ParseNodes reads a node list into one *redis.Options per node, and refuses
// a server given twice, which would vote twice.
func ExampleParseNodes() {
	nodes, err := redlock.ParseNodes("redis-a:6379,redis://:s3cret@redis-b:6379/0,rediss://redis-c:6380")
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range nodes {
		fmt.Println(o.Addr, "TLS:", o.TLSConfig != nil)
	}

	_, err = redlock.ParseNodes("10.0.0.1:6379,10.0.0.2:6379,redis://10.0.0.1:6379/2")
	fmt.Println(errors.Is(err, redlock.ErrInvalidArgument))
	fmt.Println(err)
	// Output:
	// redis-a:6379 TLS: false
	// redis-b:6379 TLS: false
	// redis-c:6380 TLS: true
	// true
	// redlock: invalid argument: node "10.0.0.1:6379" and node "redis://10.0.0.1:6379/2" talk to the same server (10.0.0.1:6379), which would vote twice: give each independent node once
}

// A try-lock: one attempt, and a contended resource is told apart from
// failing nodes with errors.Is.
func ExampleRedlock_Acquire_tryLock() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	held, _ := rl.Acquire(ctx, []string{"job:nightly"}, time.Minute) // another instance of the job
	defer held.Release(ctx)

	_, err = rl.Acquire(ctx, []string{"job:nightly"}, time.Minute, redlock.WithRetryCount(0))
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
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
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
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()

	err = rl.Using(context.Background(), []string{"report:monthly"}, 10*time.Second, func(ctx context.Context) error {
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
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"), redlock.WithFencing(true))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	for range 2 {
		lock, err := rl.Acquire(ctx, []string{"invoice:43"}, 10*time.Second)
		if err != nil {
			fmt.Println("not acquired:", err)
			return
		}
		fmt.Println("token:", lock.Token())
		// db.ExecContext(ctx, "UPDATE invoices SET ..., fence = $1 WHERE id = 43 AND fence < $1", lock.Token())
		_, _ = lock.Release(ctx)
	}

	// Using gives fn the token in its context.
	_ = rl.Using(ctx, []string{"invoice:43"}, 10*time.Second, func(ctx context.Context) error {
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
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"), redlock.WithHandOver(16, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
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
// resource. Here two Redlocks stand for two processes.
func ExampleWithFairQueue() {
	list := os.Getenv("REDLOCK_NODES")
	a, err := redlock.Open(list, redlock.WithFairQueue(true), redlock.WithIdentity("host-a"))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := redlock.Open(list, redlock.WithFairQueue(true), redlock.WithIdentity("host-b"))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()

	lock, err := a.Acquire(ctx, []string{"report:daily"}, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("host-a holds the report")
	turn := make(chan *redlock.Lock)
	go func() {
		lock, err := b.Acquire(ctx, []string{"report:daily"}, 30*time.Second, redlock.WithRetryCount(-1))
		if err != nil {
			fmt.Println(err)
		}
		turn <- lock
	}()
	for queued := false; !queued; time.Sleep(10 * time.Millisecond) { // until host-b has queued: the operator's view
		in, _ := a.Inspect(ctx, "report:daily")
		for _, w := range in.Waiters {
			if w.Identity == "host-b" {
				fmt.Println("queued:", w.Identity)
				queued = true
			}
		}
	}
	_, _ = lock.Release(ctx) // hands the nodes' keys to host-b, next in the queue

	next := <-turn
	fmt.Println("host-b holds the report:", next.Valid())
	// ... the report, while host-b's turn lasts
	_, _ = next.Release(ctx)
	// Output:
	// host-a holds the report
	// queued: host-b
	// host-b holds the report: true
}

// An Observer sees what the calls do, for metrics and logs: here it counts
// the attempts and logs each call and each lost lock.
func ExampleWithObserver() {
	var mu sync.Mutex
	attempts := map[redlock.Op]int{}
	obs := &redlock.Observer{
		Attempt: func(a redlock.AttemptInfo) {
			mu.Lock()
			attempts[a.Op]++
			mu.Unlock()
		},
		Done: func(c redlock.CallInfo) {
			fmt.Println(c.Op, c.Resources, c.Outcome)
		},
		Lost: func(l redlock.LostInfo) {
			fmt.Println("lost", l.Resources, errors.Is(l.Err, redlock.ErrLockExpired))
		},
	}
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"), redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	lock, _ := rl.Acquire(ctx, []string{"observed:1"}, 10*time.Second)
	_, _ = rl.Acquire(ctx, []string{"observed:1"}, 10*time.Second, redlock.WithRetryCount(0)) // contended
	_ = rl.ForceRelease(ctx, "observed:1")                                                    // an operator takes it back
	for i := 0; lock.Valid() && i < 200; i++ {
		time.Sleep(5 * time.Millisecond) // its holder hears it: Lost is told, the lock is no longer Valid
	}
	_, _ = lock.Extend(ctx, 10*time.Second) // fails (at once, sending nothing, once heard)
	_, _ = lock.Release(ctx)
	mu.Lock()
	fmt.Println("attempts:", attempts[redlock.OpAcquire], "acquire") // and 0 extend once the force release was heard
	mu.Unlock()
	// Output:
	// acquire [observed:1] ok
	// acquire [observed:1] contention
	// lost [observed:1] true
	// extend [observed:1] expired
	// release [observed:1] expired
	// attempts: 2 acquire
}

// Inspect says who holds a resource, whatever its kind, as the nodes see
// it: the operator's view (the redlock command's status).
func ExampleRedlock_Inspect() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"), redlock.WithIdentity("billing-7f9c/1"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	lock, _ := rl.Acquire(ctx, []string{"inspected:invoice:44"}, time.Minute)
	defer lock.Release(ctx)

	in, err := rl.Inspect(ctx, "inspected:invoice:44")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(in.Kind, in.State)
	for _, h := range in.Holders {
		// h.Nodes says on how many nodes: Acquire returns at a quorum, so
		// the last node may not have the lock yet.
		fmt.Println("holder:", h.Identity, "on a quorum:", h.OnQuorum, "value is the lock's:", h.Value == lock.Value())
	}
	free, _ := rl.Inspect(ctx, "inspected:invoice:45")
	fmt.Println("another resource:", free.Kind == redlock.KindNone, free.State)
	// Output:
	// lock held
	// holder: billing-7f9c/1 on a quorum: true value is the lock's: true
	// another resource: true free
}

// ForceRelease takes a resource back from a holder that is gone or stuck (a
// job killed with a long ttl): the holder's next extension fails.
func ExampleRedlock_ForceRelease() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	stuck, _ := rl.Acquire(ctx, []string{"import:nightly"}, time.Hour) // a job that hangs

	if err := rl.ForceRelease(ctx, "import:nightly"); err != nil {
		fmt.Println("force release:", err)
	}
	in, _ := rl.Inspect(ctx, "import:nightly")
	fmt.Println("state:", in.State)
	_, err = stuck.Extend(ctx, time.Hour)
	fmt.Println("the old holder's extension fails:", errors.Is(err, redlock.ErrLockExpired))
	err = rl.ForceRelease(ctx, "import:nightly", stuck.Value())
	fmt.Println("again:", errors.Is(err, redlock.ErrNotHeld))
	// Output:
	// state: free
	// the old holder's extension fails: true
	// again: true
}
