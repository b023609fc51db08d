package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/go-redlock/redlock"
)

// One replica of many leads: Lead campaigns, runs the leader's work with
// the term's context, and resigns when it returns. Looping over Lead leads
// again after a lost term, until ctx ends.
func ExampleElection_Lead() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close() // resigns a term still held
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	election := rl.Election("scheduler")
	for ctx.Err() == nil {
		err := election.Lead(ctx, "pod-a", 10*time.Second, func(ctx context.Context) error {
			term, _ := redlock.TokenFrom(ctx) // the term's number: fence every write with it
			fmt.Println("leading, term", term)
			// ... run the scheduler until ctx ends ...
			cancel() // (here: step down at once)
			<-ctx.Done()
			return nil
		})
		if err != nil && ctx.Err() == nil {
			fmt.Println("term ended:", err) // lost: campaign again
		}
	}
	// Output:
	// leading, term 1
}

// The election is a name: two Elections of one name, in two processes
// (here, two Redlocks over the same nodes), are the same election.
func ExampleRedlock_Election() {
	list := os.Getenv("REDLOCK_NODES")
	a, err := redlock.Open(list)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()

	term, _ := a.Election("outbox-relay").Campaign(ctx, "pod-a", 10*time.Second)
	defer term.Resign(ctx)

	b, err := redlock.Open(list) // another replica's
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	leader, _ := b.Election("outbox-relay").Leader(ctx)
	fmt.Printf("%s leads, term %d\n", leader.ID, leader.Term)
	// Output:
	// pod-a leads, term 1
}

// Campaign blocks until the candidate leads, or until ctx ends: a bounded
// wait is a ctx with a timeout.
func ExampleElection_Campaign() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()
	election := rl.Election("cron")

	first, _ := election.Campaign(ctx, "pod-a", 10*time.Second)
	wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = election.Campaign(wait, "pod-b", 10*time.Second)
	fmt.Println("pod-b leads:", err == nil, "- waited out:", errors.Is(err, context.DeadlineExceeded))

	_ = first.Resign(ctx)
	second, _ := election.Campaign(ctx, "pod-b", 10*time.Second)
	fmt.Println("pod-b leads, term", second.Number(), "> term", first.Number())
	_ = second.Resign(ctx)
	// Output:
	// pod-b leads: false - waited out: true
	// pod-b leads, term 2 > term 1
}

// A Term's context ends when the term does; its cause says how.
func ExampleTerm() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	term, _ := rl.Election("mailer").Campaign(ctx, "pod-a", 10*time.Second)
	fmt.Println(term.ID(), "leads, term", term.Number())
	go func() {
		_ = term.Resign(ctx) // a rolling deploy's SIGTERM, say
	}()
	<-term.Context().Done()
	fmt.Println("term over:", errors.Is(context.Cause(term.Context()), redlock.ErrResigned))
	// Output:
	// pod-a leads, term 1
	// term over: true
}

// Resign ends the term's context, then releases the election: a waiting
// candidate leads within a few round trips.
func ExampleTerm_Resign() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()
	election := rl.Election("indexer")

	term, _ := election.Campaign(ctx, "pod-a", 10*time.Second)
	if err := term.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
	}
	_, err = election.Leader(ctx)
	fmt.Println("no leader:", errors.Is(err, redlock.ErrNoLeader))
	// Output:
	// no leader: true
}

// Leader says who leads as a quorum of nodes holds it.
func ExampleElection_Leader() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()
	election := rl.Election("cache-warmer")

	if _, err := election.Leader(ctx); errors.Is(err, redlock.ErrNoLeader) {
		fmt.Println("nobody leads")
	}
	term, _ := election.Campaign(ctx, "pod-a", 10*time.Second)
	defer term.Resign(ctx)
	leader, err := election.Leader(ctx)
	fmt.Println(leader.ID, leader.Term, err)
	// Output:
	// nobody leads
	// pod-a 1 <nil>
}

// Observe follows the leaders: the current one, then each new term.
func ExampleElection_Observe() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	election := rl.Election("dispatcher")

	first, _ := election.Campaign(ctx, "pod-a", 10*time.Second)
	leaders, err := election.Observe(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-leaders)
	_ = first.Resign(ctx)
	second, _ := election.Campaign(ctx, "pod-b", 10*time.Second)
	fmt.Println(<-leaders)
	_ = second.Resign(ctx)
	// Output:
	// {pod-a 1}
	// {pod-b 2}
}

// A fleet-wide limit: at most 2 report renderers at once, whichever
// replicas they run in.
func ExampleWithPermits() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()
	two := redlock.WithPermits(2)

	a, _ := rl.Acquire(ctx, []string{"renderers"}, 10*time.Second, two)
	b, _ := rl.Acquire(ctx, []string{"renderers"}, 10*time.Second, two)
	_, err = rl.Acquire(ctx, []string{"renderers"}, 10*time.Second, two, redlock.WithRetryCount(0))
	fmt.Println("a third renderer:", errors.Is(err, redlock.ErrResourceLocked))
	_, _ = a.Release(ctx)
	c, err := rl.Acquire(ctx, []string{"renderers"}, 10*time.Second, two, redlock.WithRetryCount(0))
	fmt.Println("once one left:", err == nil)
	_, _ = b.Release(ctx)
	_, _ = c.Release(ctx)
	// Output:
	// a third renderer: true
	// once one left: true
}

// Many readers of a config, one writer: shared locks coexist, and the
// exclusive lock waits for them (and keeps new readers out meanwhile).
func ExampleWithShared() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()
	read := redlock.WithShared(true)

	r1, _ := rl.Acquire(ctx, []string{"config"}, 10*time.Second, read)
	r2, err := rl.Acquire(ctx, []string{"config"}, 10*time.Second, read)
	fmt.Println("two readers:", err == nil)
	_, err = rl.Acquire(ctx, []string{"config"}, 10*time.Second, redlock.WithRetryCount(0))
	fmt.Println("a writer waits:", errors.Is(err, redlock.ErrResourceLocked))
	_, _ = r1.Release(ctx)
	_, _ = r2.Release(ctx)
	w, err := rl.Acquire(ctx, []string{"config"}, 10*time.Second)
	fmt.Println("the writer, once they left:", err == nil)
	_, _ = w.Release(ctx)
	// Output:
	// two readers: true
	// a writer waits: true
	// the writer, once they left: true
}

// An Election is a name over the nodes: every replica that uses the same
// name takes part in the same election.
func ExampleElection() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	election := rl.Election("scheduler")
	fmt.Println(election.Name())
	// Output:
	// scheduler
}

// Name is the name the Election was made with.
func ExampleElection_Name() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	fmt.Println(rl.Election("outbox-relay").Name())
	// Output:
	// outbox-relay
}

// Leader is who leads, as Election.Leader and Observe report it.
func ExampleLeader() {
	l := redlock.Leader{ID: "pod-a", Term: 7}
	fmt.Printf("%s leads in term %d\n", l.ID, l.Term)
	// Output:
	// pod-a leads in term 7
}

// ID is the name the candidate campaigned as.
func ExampleTerm_ID() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()
	term, _ := rl.Election("janitor").Campaign(ctx, "pod-a", 10*time.Second)
	defer term.Resign(ctx)
	fmt.Println(term.ID())
	// Output:
	// pod-a
}

// Number is the term's fencing token: every later term's is greater, so a
// store that keeps the highest it has seen refuses a deposed leader.
func ExampleTerm_Number() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()
	election := rl.Election("ledger-writer")

	var highest uint64 // the store's
	write := func(term uint64) bool {
		if term < highest {
			return false
		}
		highest = term
		return true
	}
	old, _ := election.Campaign(ctx, "pod-a", 10*time.Second)
	_ = old.Resign(ctx)
	next, _ := election.Campaign(ctx, "pod-b", 10*time.Second)
	defer next.Resign(ctx)
	fmt.Println("pod-b writes:", write(next.Number()))
	fmt.Println("pod-a, deposed, writes:", write(old.Number()))
	// Output:
	// pod-b writes: true
	// pod-a, deposed, writes: false
}

// Context ends when the term does; the leader's work watches it.
func ExampleTerm_Context() {
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	term, _ := rl.Election("compactor").Campaign(ctx, "pod-a", 10*time.Second)
	_ = rl.Close() // resigns the term
	<-term.Context().Done()
	fmt.Println(errors.Is(context.Cause(term.Context()), redlock.ErrClosed))
	// Output:
	// true
}
