package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher combines concurrent script calls to one node into one pipeline:
// one write and one read for the whole batch instead of one each per call,
// on the client and on the node. It starts no goroutine: the node goroutine
// that finds the node idle runs its own call directly (no cost when there is
// no concurrency), hands its vote in, and then leads: it runs whatever other
// calls queued meanwhile, batch after batch, until the queue is empty.
//
// A hung node holds up its leader and the calls queued behind it; each
// counts against the node's outstanding cap once its attempt's deadline has
// passed, so the number of goroutines waiting on the node stays bounded.
type batcher struct {
	mu      sync.Mutex
	queue   []*pending
	leading bool
}

// pending is one queued call and where its answer goes.
type pending struct {
	s        *script
	keys     []string
	args     []any
	deadline time.Time
	err      error
	done     chan struct{}
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

// do runs s on c, batched with the calls other goroutines make meanwhile. It
// reports whether the caller must call lead once it has used the answer.
func (b *batcher) do(ctx context.Context, c redis.UniversalClient, s *script, keys []string, args []any) (lead bool, err error) {
	b.mu.Lock()
	if !b.leading {
		b.leading = true
		b.mu.Unlock()
		return true, s.run(ctx, c, keys, args)
	}
	p := pendingPool.Get().(*pending)
	p.s, p.keys, p.args = s, keys, args
	p.deadline, _ = ctx.Deadline()
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	<-p.done
	err = p.err
	*p = pending{done: p.done}
	pendingPool.Put(p)
	return false, err
}

// lead runs the queued calls until none is left, then gives up the lead.
func (b *batcher) lead(c redis.UniversalClient) {
	for {
		b.mu.Lock()
		batch := b.queue
		b.queue = nil
		if len(batch) == 0 {
			b.leading = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		runBatch(c, batch)
		for _, p := range batch {
			p.done <- struct{}{}
		}
	}
}

// runBatch runs a batch: alone when it is one call, else its EVALSHAs in one
// pipeline, where a call whose script the node lacks (NOSCRIPT) is run again
// on its own, which loads it. The batch has its own deadline, the latest of
// its calls': no caller's cancellation cuts the others' commands.
func runBatch(c redis.UniversalClient, batch []*pending) {
	var deadline time.Time
	for _, p := range batch {
		if p.deadline.After(deadline) {
			deadline = p.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if len(batch) == 1 {
		p := batch[0]
		p.err = p.s.run(ctx, c, p.keys, p.args)
		return
	}
	cmds := make([]*redis.Cmd, len(batch))
	_, _ = c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, p := range batch {
			cmds[i] = pipe.EvalSha(ctx, p.s.hash, p.keys, p.args...)
		}
		return nil
	})
	for i, p := range batch {
		res, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			p.err = p.s.run(ctx, c, p.keys, p.args)
			continue
		}
		p.err = p.s.judge(res, err, len(p.keys))
	}
}
