// Package redlock implements the Redlock distributed lock over several
// independent Redis nodes, on go-redis v9: a port of node-redlock v5, with
// its numbers and scripts kept and its known faults fixed, plus fencing
// tokens, leader election, semaphores, shared locks and fair queues on the
// same engine.
//
// # The algorithm
//
// A [Redlock] holds one go-redis client per node ([Open] makes them from a
// node list; [New] takes yours), or any client's through package driver
// ([NewFromNodes]; modules redlockrueidis and redlockvalkey adapt rueidis
// and valkey-go). [Redlock.Acquire] writes a random value
// under each resource on every node at once, with a script that is
// all-or-nothing on each node. The lock is held when a quorum of n/2+1 nodes
// voted for it, for as long as its validity:
//
//	drift      = round(driftFactor × ttl) + 2ms
//	expiration = start of the successful attempt + ttl − drift
//
// An attempt is decided as soon as its outcome is certain, so a call returns
// once a quorum has voted, not when the slowest node answers. A failed
// attempt releases what it wrote, then the call tries again after a jittered
// delay (200ms ± 100ms, for a window of 10 retries by default; see
// [WithRetryCount]), or as soon as a release of the resources is announced.
// [Lock.Extend] resets the ttl on a quorum and returns a new [Lock];
// [Lock.Release] deletes the keys that still hold the lock's value.
// [Redlock.Using] runs a function under a lock that it extends while the
// function runs, and cancels the function's context, with a cause matching
// [ErrExtensionFailed], when the lock is lost.
//
// Every call to a node is bounded by the node timeout ([WithNodeTimeout],
// default 100ms) whether or not the client has a timeout of its own, and no
// call outlives its context; a pause of this process meanwhile (a long
// garbage collection) is added, at most 4 node timeouts more. A node that
// stays silent votes against, and its calls fail at once, unsent, until
// one probe call is answered.
//
// # How many nodes
//
// 1 node: a restart without its data hands the lock to the next caller
// while its holder goes on. 2 nodes: the quorum is both, so either node
// down stops every lock (no availability gained over 1 node), but a
// restart without data lets no second holder in, as the other node still
// holds the lock. 3 nodes tolerate 1 failure, 5 tolerate 2; an even number
// tolerates no more than the odd number below it.
//
// # Primitives
//
// One engine runs every primitive; options on the calls you already make
// choose the kind:
//
//   - an exclusive lock: [Redlock.Acquire], [Redlock.Using];
//   - with fencing tokens: [WithFencing], [Lock.Token], [TokenFrom];
//   - a counting semaphore: [WithPermits];
//   - a shared (read) lock beside the exclusive one: [WithShared];
//   - contended locks: handed over inside a process ([WithHandOver], on by
//     default) and queued first come, first served across processes
//     ([WithFairQueue]);
//   - leader election with fenced terms: [Redlock.Election], [Election.Lead];
//   - for operators: [Redlock.Inspect] (who holds a resource) and
//     [Redlock.ForceRelease] (take it back);
//   - for replicated nodes: [WithReplicaAck] and [WithAOFAck];
//   - for metrics and traces: [WithObserver] (and the module
//     github.com/go-redlock/redlock/redlockotel for OpenTelemetry).
//
// For tests of code that takes locks, the package
// github.com/go-redlock/redlock/redlocktest gives a Redlock on in-memory
// nodes, with the faults a test wants: a node down, a node that hangs, a
// lock lost under Using.
//
// # Errors
//
// Every error names what happened and, for bad input or a refusal, what to
// do. Branch with errors.Is: [ErrResourceLocked] (held by another),
// [ErrLockExpired] (lost), [ErrExtensionFailed] (lost under Using),
// [ErrInvalidArgument] (bad input, refused before anything is sent),
// [ErrNotHeld], [ErrNoLeader], [ErrClosed], and the context's own error.
// [*ExecutionError] carries every attempt: which nodes voted for, and why
// each other node voted against.
//
// # Guarantees
//
//   - Mutual exclusion while a majority of the nodes is up and keeps its
//     data, and while the nodes' clocks run at about the same rate. A [Lock]
//     is never returned expired: an attempt that reaches its quorum after the
//     lock's validity has passed is a failure, and is cleaned up.
//   - Fencing tokens grow across holders of a resource while any minority of
//     the nodes fails, so that a store which refuses a lower token than it
//     has seen refuses a paused holder that came back.
//   - Liveness with a sick minority: a hung, slow, partitioned or refusing
//     minority never holds a call up beyond the node timeout, parks a small
//     bounded number of goroutines, and is counted once per server.
//   - One server votes once: [New] refuses two clients with one address, and
//     a server reached under two names is found at its first answer.
//   - Lost means lost: an extension counts only the nodes that still held
//     the lock. A node that lost its key (a restart without persistence)
//     gets it back at the next extension, so a rolling restart keeps every
//     lock, but votes against; a lock gone from a quorum is never reported
//     held, its holder (Using's fn, a term) is told before what is left of
//     it is released, and a force release ends its holder's lock at once.
//
// # Limits
//
//   - A majority of the nodes restarted without their data within one ttl
//     can let two holders in. Run the nodes with AOF persistence, or keep a
//     restarted node out for the longest ttl in use.
//   - A holder paused past its expiration (a long GC pause, a stopped VM)
//     can still act after another has acquired: finish before
//     [Lock.Expiration], check [Lock.Valid] before acting, and where the
//     protected resource can check a number, use fencing tokens.
//   - Clock jumps on a node are not covered by the drift allowance.
//   - A Cluster, a Sentinel group or a node with replicas counts as one
//     node; its replication is asynchronous, so a failover can lose a lock
//     unless the vote waits for replicas ([WithReplicaAck]).
//   - On a Cluster, the resources of one lock must share a hash slot (a hash
//     tag such as "{orders}:1"); a [redis.Ring] is refused.
//   - Servers: tested on Redis 6.2, 7.0 and 7.2 and Valkey 8.0 (README's
//     table). On a Redis 6.2 Cluster waiters wake at their retry delay (no
//     sharded pub/sub); [WithAOFAck] needs Redis 7.2 or Valkey.
//
// # Concurrency
//
// A Redlock and a Lock are safe for concurrent use by multiple goroutines.
// New starts no goroutine; every goroutine a Redlock starts has an owner
// and ends, the last of them at [Redlock.Close]. Close the Redlock before
// the clients given to New (Open's are closed by Close), before a process
// exits, so that the releases still on their way are sent.
//
// # Where to read more
//
// In the repository: README.md (a tour with the code of each primitive),
// RELIABILITY.md (each guarantee, the test that measures it, the failure
// Redlock does not survive and what to configure against it),
// benchmarks/README.md (every performance figure, with its command),
// cmd/redlock/README.md (the redlock command: a job under a lock from a
// shell), CONTRIBUTING.md (which file holds what, how to run the tests),
// and CHANGELOG.md (every change to the API, with its migration).
//
// From node-redlock, the names map one to one:
//
//	new Redlock(clients, settings)      New(clients, opts...)
//	redlock.acquire(resources, ms, s)   rl.Acquire(ctx, resources, ttl, opts...)
//	redlock.extend(lock, ms, s)         lock.Extend(ctx, ttl, opts...)
//	redlock.release(lock, s)            lock.Release(ctx, opts...)
//	redlock.using(res, ms, s, routine)  rl.Using(ctx, res, ttl, fn, opts...)
//	settings.driftFactor etc.           WithDriftFactor, WithRetryCount, WithRetryDelay,
//	                                    WithRetryJitter, WithAutomaticExtensionThreshold
//	signal.aborted / signal.error       ctx.Done() / context.Cause(ctx)
//	redlock.on("error", fn)             WithErrorHandler(fn)
package redlock
