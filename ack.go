package redlock

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/lane"
)

// Replica acknowledgement (WithReplicaAck, WithAOFAck): a node's vote for
// acquire, extend or a fencing write-back counts only once its write has
// reached enough replicas (or, with WAITAOF, the append-only files), so that
// a failover of that node keeps the lock.

// WithReplicaAck makes a node's vote for an acquire, an extend or a fencing
// write-back count only once the write reached at least replicas of the
// node's replicas within timeout (WAIT), so that a lock survives a failover
// of the node (a Sentinel group, a Cluster shard); a node that falls short
// votes against with a [*ReplicaAckError]. timeout must be whole
// milliseconds below half the node timeout, and the clients' ReadTimeout
// above timeout + 100ms. WAIT is not consensus: a failover can still lose
// an acknowledged write in rare cases. replicas 0 turns it off. Default: off.
func WithReplicaAck(replicas int, timeout time.Duration) LockOption {
	return func(c *config) {
		if replicas == 0 {
			c.ack = nil
			return
		}
		c.ack = &lane.Ack{Replicas: replicas, Timeout: timeout}
	}
}

// WithAOFAck is [WithReplicaAck] with WAITAOF (Redis 7.2 and later): the
// write must be in the append-only file of at least replicas replicas and,
// with local, of the node itself (appendonly yes). A node older than 7.2
// refuses, naming its version, and the call ends. Replicas report their
// file writes once a second, so give timeout a second or more, with a node
// timeout above twice that. local false and replicas 0 turns it off.
// Default: off.
func WithAOFAck(local bool, replicas int, timeout time.Duration) LockOption {
	return func(c *config) {
		if !local && replicas == 0 {
			c.ack = nil
			return
		}
		l := 0
		if local {
			l = 1
		}
		c.ack = &lane.Ack{Replicas: replicas, Local: l, AOF: true, Timeout: timeout}
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
func checkAck(nodes []*lane.Node, cfg *config) error {
	if cfg.ack == nil {
		return nil
	}
	need := cfg.ack.Timeout + 100*time.Millisecond // the node ends a WAIT up to 1000/hz ms late
	for _, nd := range nodes {
		var rt time.Duration
		switch c := nd.Client().(type) {
		case *redis.Client:
			rt = c.Options().ReadTimeout
		case *redis.ClusterClient:
			rt = c.Options().ReadTimeout
		}
		if rt > 0 && rt < need {
			return invalid("the replica wait %v (WithReplicaAck) needs clients[%d]'s ReadTimeout above %v (the wait, and up to 100ms the node "+
				"may take past it), but it is %v: raise ReadTimeout in the client's options, or lower the wait", cfg.ack.Timeout, nd.Index(), need, rt)
		}
	}
	return nil
}
