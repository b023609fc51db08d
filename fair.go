package redlock

import (
	"context"
	"time"

	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/slot"
)

// The fair queue (WithFairQueue): an Acquire that finds its resources held
// queues on every node under an id of its own, scored by when it began
// waiting on its clock, so that every node orders the waiters it has the
// same way; a release hands each resource to the head of its queue
// (script.FairRelease), and announces it by the head's id, which wakes
// that waiter wherever it is. A resource is taken, as by a plain acquire,
// only by the head of its queue, or by the waiter it was handed to: the
// attempt that takes it writes the attempt's value with the whole ttl, and
// the lock's validity counts from that attempt's start, as for any grant.
//
// A waiter asks again at least every third of its liveness (fairLive), which
// renews its place; one that gave up leaves at once (leave), and one that
// vanished leaves when its liveness runs out, as does, a liveness after
// the release, a resource handed to it. Mutual exclusion is untouched: a
// key holds one value or one id, and a holder needs a quorum of keys with
// its own value.

// queueKey and queueLiveKey return the keys of resource's queue and of its
// waiters' deadlines, in its slot.
func queueKey(resource string) string {
	return script.QueuePrefix + "{" + slot.Tag(resource) + "}:" + resource
}

func queueLiveKey(resource string) string {
	return script.QueueLivePrefix + "{" + slot.Tag(resource) + "}:" + resource
}

// fairKeys returns the KEYS of the fair scripts: the resources, their
// queues, their deadlines.
func fairKeys(resources []string) []string {
	keys := make([]string, 0, 3*len(resources))
	keys = append(keys, resources...)
	for _, r := range resources {
		keys = append(keys, queueKey(r))
	}
	for _, r := range resources {
		keys = append(keys, queueLiveKey(r))
	}
	return keys
}

// fairLive is how long a waiter keeps its place in the queues without
// asking again: a second, or five node timeouts when that is longer.
func fairLive(cfg *config) time.Duration { return max(time.Second, 5*cfg.nodeTimeout) }

// fairAcquirePlan locks resources for ttl through the fair queue, as a
// waiter with a new id that began waiting now.
func fairAcquirePlan(resources []string, ttl time.Duration, cfg *config) *plan {
	p := acquirePlan(resources, ttl)
	p.queue, p.live = randomValue(), fairLive(cfg)
	p.s, p.keys = script.FairAcquire, fairKeys(resources)
	p.args = []any{nil, int64(ttl / time.Millisecond), p.queue, time.Now().UnixMilli(), p.live.Milliseconds()}
	return p
}

// fairReleasePlan releases a lock of the fair queue, whose waiter's id is
// queue: each resource goes to the head of its queue.
func fairReleasePlan(resources []string, value, queue string, until time.Time, live time.Duration) *plan {
	p := releasePlan(resources, value, until)
	p.s, p.keys = script.FairRelease, fairKeys(resources)
	p.args = []any{value, queue, live.Milliseconds()}
	return p
}

// leave takes a waiter that gave up out of the queues, and hands on what
// was handed to it: one attempt on every node, within the node timeout.
func (r *Redlock) leave(ctx context.Context, cfg *config, p *plan) {
	lp := fairReleasePlan(p.res, p.queue, p.queue, time.Time{}, p.live)
	lp.acked = p.acked
	r.attempt(context.WithoutCancel(ctx), cfg, lp, lp.args, nil, cfg.nodeTimeout)
}
