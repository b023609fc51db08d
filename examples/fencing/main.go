// Command fencing shows why a lock needs a fencing token, and how the
// protected resource uses it: a holder paused past its lock's expiration
// comes back and writes after the next holder did, and the store refuses
// the stale write because its token is lower.
//
//	go run ./examples/fencing                       # three embedded nodes
//	go run ./examples/fencing -addrs 127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381
//
// The store here is a map in memory; the same check in SQL and in a Redis
// script is in the doc of redlock's Lock.Token.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/examples/internal/demo"
)

// ErrStaleToken is the store's refusal of a write from a holder whose lock
// has been granted to someone else since.
var ErrStaleToken = errors.New("stale fencing token")

// Store is a protected resource that checks fencing tokens: it remembers,
// per record, the highest token that wrote it, and refuses a write whose
// token is below that. (The same holder may write again with its token.)
type Store struct {
	mu      sync.Mutex
	records map[string]record
}

type record struct {
	value string
	fence uint64 // the highest token that wrote it
}

// Write sets id to value on behalf of the holder of token.
func (s *Store) Write(id string, token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[id]
	if token < r.fence {
		return fmt.Errorf("%w: write of %q with token %d, the record was written with token %d", ErrStaleToken, value, token, r.fence)
	}
	if s.records == nil {
		s.records = map[string]record{}
	}
	s.records[id] = record{value: value, fence: token}
	return nil
}

// Read returns id's value and the token that wrote it.
func (s *Store) Read(id string) (string, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[id]
	return r.value, r.fence
}

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
	// WithFencing as a default: every lock of this Redlock has a token.
	rl, err := redlock.Open(list, redlock.WithFencing(true))
	if err != nil {
		return err
	}
	defer rl.Close()
	ctx := context.Background()
	store := &Store{}
	account := []string{"fencing-demo:account:7"}

	// Holder A takes the lock, writes, and then stalls (a GC pause, a
	// stopped VM) for longer than its ttl.
	a, err := rl.Acquire(ctx, account, 300*time.Millisecond)
	if err != nil {
		return fmt.Errorf("acquire for holder A: %w", err)
	}
	fmt.Printf("A holds the lock with token %d\n", a.Token())
	if err := store.Write("account:7", a.Token(), "balance=100 (A)"); err != nil {
		return err
	}
	fmt.Println("A writes: accepted")
	fmt.Println("A pauses for 500ms, past its lock's expiration")
	time.Sleep(500 * time.Millisecond)

	// Meanwhile the lock expired, and holder B got it (here after A's
	// pause; in life, during it), with a larger token.
	b, err := rl.Acquire(ctx, account, 5*time.Second)
	if err != nil {
		return fmt.Errorf("acquire for holder B: %w", err)
	}
	fmt.Printf("B holds the lock with token %d\n", b.Token())
	if err := store.Write("account:7", b.Token(), "balance=80 (B)"); err != nil {
		return err
	}
	fmt.Println("B writes: accepted")

	// A wakes up, believes it still holds the lock, and writes.
	err = store.Write("account:7", a.Token(), "balance=150 (A, stale)")
	fmt.Printf("A writes again: errors.Is(err, ErrStaleToken) = %v\n  %v\n", errors.Is(err, ErrStaleToken), err)
	if err == nil {
		return errors.New("the stale write was accepted")
	}
	if _, err := b.Release(ctx); err != nil {
		return fmt.Errorf("release for holder B: %w", err)
	}

	// With Using, fn finds the token in its context.
	err = rl.Using(ctx, account, 5*time.Second, func(ctx context.Context) error {
		token, _ := redlock.TokenFrom(ctx)
		fmt.Printf("C holds the lock through Using, with token %d\n", token)
		return store.Write("account:7", token, "balance=90 (C)")
	})
	if err != nil {
		return fmt.Errorf("holder C: %w", err)
	}
	value, fence := store.Read("account:7")
	fmt.Printf("the record: %s, written with token %d\n", value, fence)
	return nil
}
