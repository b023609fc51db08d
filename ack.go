package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replica acknowledgement (WithReplicaAck, WithAOFAck): a node's vote for
// acquire, extend or a fencing write-back counts only once its write has
// reached enough replicas (or, with WAITAOF, the append-only files), so that
// a failover of that node keeps the lock.

// ackPolicy is what a write must reach before its node votes for.
type ackPolicy struct {
	replicas int           // replicas that must acknowledge
	local    int           // WAITAOF: 1 when the primary's own AOF must have it
	aof      bool          // WAITAOF instead of WAIT
	timeout  time.Duration // how long the node waits for them
}

// strictest returns the policy that covers every call of a batch that has
// one (the most replicas, the longest timeout), or nil when none has.
func strictest(calls []*call) *ackPolicy {
	var out *ackPolicy
	for _, c := range calls {
		a := c.ack
		if a == nil {
			continue
		}
		if out == nil {
			cp := *a
			out = &cp
			continue
		}
		out.replicas, out.local, out.timeout = max(out.replicas, a.replicas), max(out.local, a.local), max(out.timeout, a.timeout)
		out.aof = out.aof || a.aof
	}
	return out
}

// send queues the WAIT (or WAITAOF) on pipe. (go-redis's Pipeliner leaves
// out the blocking commands; Do sends them all the same.)
func (a *ackPolicy) send(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	ms := a.timeout.Milliseconds()
	if a.aof {
		return pipe.Do(ctx, "WAITAOF", a.local, a.replicas, ms)
	}
	return pipe.Do(ctx, "WAIT", a.replicas, ms)
}

// judgeAcks records how many replicas took each call's write (wait's
// answer), and turns the vote for of a call whose write fell short into a
// vote against.
func judgeAcks(calls []*call, wait *redis.Cmd) {
	replicas, local := -1, -1
	res, err := wait.Result()
	if err == nil {
		switch v := res.(type) {
		case int64:
			replicas = int(v)
		case []any:
			if len(v) == 2 {
				l, ok1 := v[0].(int64)
				r, ok2 := v[1].(int64)
				if ok1 && ok2 {
					local, replicas = int(l), int(r)
				}
			}
		}
		if replicas < 0 {
			err = &unexpectedResult{res}
		}
	}
	for _, c := range calls {
		if c.ack == nil || c.err != nil {
			continue // -1: the script itself failed
		}
		c.acks = replicas
		switch {
		case err != nil:
			c.err = err
		case replicas < c.ack.replicas || c.ack.aof && local < c.ack.local:
			c.err = &ReplicaAckError{Replicas: c.ack.replicas, Acked: replicas, AOF: c.ack.aof, Local: c.ack.local == 1,
				LocalAcked: local == 1, Timeout: c.ack.timeout}
		}
	}
}

// ReplicaAckError is a node's vote against when its write was applied but
// reached fewer replicas than [WithReplicaAck] (or [WithAOFAck]) asks for
// within its timeout: a failover of that node could lose it. The write stays
// until the failed attempt's cleanup, or the lock's release, deletes it.
type ReplicaAckError struct {
	Replicas   int           // replicas asked for
	Acked      int           // replicas that acknowledged
	AOF        bool          // WAITAOF: acknowledged means written to their append-only file
	Local      bool          // WAITAOF: the primary's own append-only file was asked for
	LocalAcked bool          // and had it
	Timeout    time.Duration // how long the node waited
}

// Error implements the error interface.
func (e *ReplicaAckError) Error() string {
	if e.AOF {
		s := fmt.Sprintf("written, but in the append-only file of %d of the %d replicas asked for within %v (WithAOFAck)", e.Acked, e.Replicas, e.Timeout)
		if e.Local && !e.LocalAcked {
			s += ", nor in the node's own"
		}
		return s
	}
	return fmt.Sprintf("written, but acknowledged by %d of the %d replicas asked for within %v (WithReplicaAck)", e.Acked, e.Replicas, e.Timeout)
}

// checkAck refuses a replica wait that a node's client would cut short: go-redis
// reads WAIT's answer under the client's ReadTimeout, and a client that gives
// up first looks like a silent node.
func (r *Redlock) checkAck(cfg *config) error {
	if cfg.ack == nil {
		return nil
	}
	need := cfg.ack.timeout + 100*time.Millisecond // the node ends a WAIT up to 1000/hz ms late
	for _, nd := range r.nodes {
		var rt time.Duration
		switch c := nd.client.(type) {
		case *redis.Client:
			rt = c.Options().ReadTimeout
		case *redis.ClusterClient:
			rt = c.Options().ReadTimeout
		}
		if rt > 0 && rt < need {
			return invalid("the replica wait %v (WithReplicaAck) needs clients[%d]'s ReadTimeout above %v (the wait, and up to 100ms the node "+
				"may take past it), but it is %v: raise ReadTimeout in the client's options, or lower the wait", cfg.ack.timeout, nd.index, need, rt)
		}
	}
	return nil
}
