// Package redlock implements the Redlock distributed lock over several
// independent Redis nodes, on go-redis v9. It is a port of node-redlock v5,
// with its numbers and scripts kept and its known faults fixed.
//
// # The algorithm
//
// A [Redlock] holds one go-redis client per node. [Redlock.Acquire] writes a
// random value (32 hex characters, then [WithIdentity]) under each resource on
// all nodes at once, with a script that is all-or-nothing on each node. The lock is held when
// a quorum of n/2+1 nodes voted for it, and for as long as its validity:
//
//	drift      = round(driftFactor × ttl) + 2ms
//	expiration = start of the successful attempt + ttl − drift
//
// A failed attempt releases what it wrote, then the call retries after a
// jittered delay (200ms ± 100ms), or sooner when a release of the resources
// is announced, for a window of retries × delay (default 10 × 200ms = 2s;
// see [WithRetryCount]). [Redlock.Extend] resets the ttl on a quorum and
// returns a new [Lock]; [Redlock.Release] deletes the keys that still hold
// the lock's value.
//
// [Redlock.Using] runs a function under a lock that it extends while the
// function runs; the function's context is cancelled, with a cause matching
// [ErrExtensionFailed], as soon as an extension finds the lock gone, and at
// the latest at the lock's cancel point, a quarter of the extension
// threshold (100ms at most) before its validity ends, when no extension got
// through by then.
//
// # What is fixed, compared with node-redlock
//
//   - An attempt is decided as soon as its outcome is certain, so an even
//     number of nodes that splits never hangs, and a call returns as soon as a
//     quorum has voted rather than waiting for the slowest node.
//   - Every node call has a timeout enforced by redlock ([WithNodeTimeout]),
//     which holds even when the go-redis client has none of its own, and no
//     call outlives its ctx. Setting up a node's connection (the first, or
//     one after a broken one) is waited for up to 5 node timeouts, and goes
//     on within the client's DialTimeout so that the next attempt finds it. A node silent past that timeout has its circuit
//     opened: its calls fail at once, unsent, until a single probe call is
//     answered. At most 4 call goroutines are parked on a node that does
//     not answer (on a Cluster, per shard: a hung shard holds up only its
//     own slots), plus the waker subscriptions that were already connecting
//     when it went silent (none starts once it is seen to be silent); they
//     end when the node answers or the client times out. A caller that gives up early never makes a healthy node look sick.
//   - One server votes once: New refuses two clients with one address
//     (several databases of one server included), and each plain node
//     reads its server's run_id at first contact, so that a server reached
//     under a second name (localhost and 127.0.0.1) votes against, with an
//     error naming both nodes, rather than making a majority of one.
//   - A node that lacks a script (NOSCRIPT, after a restart, SCRIPT FLUSH or
//     a first use) runs the calls of a batch in their order all the same:
//     a release never runs before the acquire it releases.
//   - An attempt that reaches a quorum only after the lock's validity has
//     passed is a failure, and is cleaned up.
//   - A failed acquire attempt releases what it wrote before the next one,
//     and every attempt writes a value of its own (so that release can never
//     delete a later attempt's keys). A retry is not refused by the node an
//     earlier attempt won, and waiters on one resource never split the nodes
//     between them (with node-redlock's kept partial holds, 8 waiters with
//     unlimited retries on 5 nodes can livelock until they give up).
//   - Extend and Release of a lock that has expired, was taken over, or was
//     already released or extended end at once with [ErrLockExpired] instead
//     of retrying for the whole retry window (or for ever).
//   - Duplicate and empty resources, bad ttls and out-of-range options are
//     refused before anything is sent, with an error matching
//     [ErrInvalidArgument] that names the bad value.
//
// # The life of a lock
//
// Acquire returns a [Lock]; Extend returns a new Lock for the same lock and
// the old handle can no longer be extended. Release through any handle
// releases the lock, its newest extension included, so the Go form of
// node-redlock's try/finally works:
//
//	lock, err := rl.Acquire(ctx, resources, ttl)
//	if err != nil {
//		return err
//	}
//	defer lock.Release(ctx)
//	...
//	lock, err = lock.Extend(ctx, ttl)
//
// Nothing watches a lock between calls: a lock lost on the nodes (taken by
// another holder after it expired, or after a node forgot it) is noticed at
// the next Extend, which fails with [ErrLockExpired]; under Using, at the
// next automatic extension, at most ttl − threshold after the loss, when
// fn's context is cancelled. A key that is merely missing (a node restarted
// empty, a slow node the acquire had not reached, a key deleted by hand) is
// written back by the next extension while the lock is valid and no one
// else holds it: see "Extensions restore what a node lost".
//
// Pass Release the ctx of the work, a request's included. A Release whose
// ctx has already ended (the request's deadline passed during the work)
// still makes one attempt, bounded by the node timeout; to give it a whole
// retry window instead, pass context.WithoutCancel(ctx) with a timeout of
// your own. Once a release has been sent, no handle is [Lock.Valid], even if
// the release failed: its deletes may have landed. A failed Acquire returns
// once what it wrote has been released on every node it reached, waiting at
// most its attempt's timeout (the node timeout, or ttl − drift when
// shorter; a node whose round trip is over about half of that gets its
// release just after). A process calls [Redlock.Close] before it exits,
// and before closing the clients: Release returns at quorum, and Close waits
// for the deletes still on their way to the other nodes.
//
// # Performance
//
// Concurrent calls to the same node are sent together as one pipeline: each
// node (each Cluster shard) has a queue and at most one worker goroutine,
// which sends whatever queued while its previous batch was out in one
// write. A Redlock shared by many goroutines therefore makes far fewer round
// trips than it serves calls; a single goroutine pays one round trip per
// node per call.
//
// # Errors
//
// Callers branch with [errors.Is]: [ErrResourceLocked] (the quorum was lost to
// another holder), [ErrLockExpired] (the lock is no longer held),
// [ErrInvalidArgument] (bad input, refused before anything is sent, and on a
// Cluster resources in different hash slots), and the context's error when
// ctx ended the call. A quorum lost to node failures matches none of them.
// Failures of Acquire, Extend and Release are [*ExecutionError] values whose
// text says what happened ("held by another lock on 2 of 3 nodes (quorum
// 2)", "no quorum: ...; node 2 (10.0.0.3:6379): no answer within 100ms (WithNodeTimeout)"),
// with every attempt's [ExecutionStats]: which nodes voted for, and each vote
// against as a [*NodeError]. Error replies that retrying cannot fix (NOAUTH,
// WRONGPASS, NOPERM, a script refused by an ACL, WRONGTYPE, CROSSSLOT, an
// unknown command, DENIED) end the call at once when they keep it from a
// quorum, and the error says what to change. [WithErrorHandler] receives
// every vote against as it happens, node-redlock's "error" event.
//
// # Guarantees and non-guarantees
//
// Redlock gives mutual exclusion while a majority of nodes is up and keeps
// its data, and while the nodes' clocks advance at about the same rate: the
// drift allowance covers small rate differences, not clock jumps. A node
// restarted without persistence forgets the locks it held; an operator should
// either enable AOF persistence with fsync, or keep a restarted node out for
// at least the longest ttl in use. A holder paused past its expiration (a
// long GC pause, a stopped VM) can still act after another holder has
// acquired: do the work within [Lock.Expiration], check [Lock.Valid] before
// acting on the protected resource, and, where the resource can check a
// number, use fencing tokens.
//
// # Fencing tokens
//
// With [WithFencing], a Lock carries a token ([Lock.Token]; inside Using's
// fn, [TokenFrom]) that is greater than the token of every fenced lock on
// any of the same resources granted before it. The protected resource
// remembers the highest token that wrote each record and refuses a write
// with a lower one, so a paused holder that comes back cannot overwrite its
// successor's work:
//
//	UPDATE accounts SET balance = $2, fence = $3 WHERE id = $1 AND fence < $3
//
// On healthy nodes the tokens of a resource count 1, 2, 3, ...; a lock on
// several resources gets 1 + the highest of their counters, written back to
// each.
//
// How: each node keeps a counter per resource, "redlock:fence:{tag}:resource"
// (tag is the resource's hash tag, or the resource itself, so a Redis
// Cluster keeps it in the resource's slot; [FenceKey] gives it), with no
// expiry. The acquire
// script also answers the node's counters; the token is 1 + the highest
// among the quorum that voted for. A second round writes the token back:
// on each node, counter = max(counter, token), only where every resource
// still holds this lock's value. The lock is granted when a quorum took the
// write-back within the lock's validity; otherwise the attempt failed and is
// cleaned up. Unfenced locks and failed first rounds leave the counters
// alone; a write-back that reached some nodes but not a quorum in time may
// make the next token skip a number, never repeat one. A grant promises its
// token on a quorum, not on every node: a node that voted against (it still
// held the previous lock, whose release returns at quorum too, or it was
// slow) took no write-back, and its counter lags until a later grant's
// write-back reaches it. Read a counter from a quorum, never from one node.
//
// Why the tokens grow (a sketch). Let A and B be fenced locks sharing
// resource r, B granted after A's hold ended (mutual exclusion orders them).
// A was granted only once a quorum W of nodes had run A's write-back, each
// while r held A's value there. B's first round voted for on a quorum R,
// each node reading its counter of r in the same script that set B's value
// on r. W and R, two majorities of the same n nodes, share a node x. On x,
// B's value stayed on r from B's acquire there until B was granted (it
// expires a whole ttl after the acquire, later than B's validity, and
// nothing else deletes it), so A's write-back on x, which needed A's value
// there and came before A's grant, hence before B's, came before B's
// acquire on x. So B read a counter of at least A's token on x, and B's
// token, 1 + the highest counter it read, is greater.
//
// Its assumptions are those of mutual exclusion (clocks that advance at
// about the same rate), plus one about data: the counters that a grant's
// write-back set must still be there when a later grant reads them. A grant
// whose write-back reached w nodes survives the loss of the counters on up
// to w + q − n − 1 of them (q = n/2+1): on healthy nodes (w = n) any
// minority may lose its data, but after a grant made while a minority was
// down (w = q), the loss of any one of its nodes' counters can let a later
// token repeat an earlier one, until the resource's next grant reaches
// every node. A node restarted without data is safe for the locks after a
// ttl (see above), but never for the counters: run the nodes with AOF
// persistence when tokens matter. The counters cost about 110 bytes of node
// memory per resource ever fenced (Redis 7.0, a 12-character resource name;
// see README.md). They never expire: a counter that vanished would restart
// at 1, and the resource would refuse every new holder. Delete a resource's
// counter only together with the records it protects.
//
// # Extensions restore what a node lost
//
// Every extension (Extend, Using's, a term's) reaches every node, not only
// the quorum that decided it: a call not yet sent when its attempt was won
// is sent all the same, whatever the caller's ctx. And on each node it
// writes the lock again where its key is missing and nothing else holds it:
// all or nothing on the node, never over another holder's key, permit or
// reader; a fenced lock's extension also raises the node's counters to its
// token, a term's writes its record and raises its counter. So a node that
// restarted empty holds the lock again after the next extension, and a lock
// held through a rolling restart of its nodes (one at a time, each kept
// down for a ttl) keeps its spread instead of eroding node by node
// (TestRollingRestartKeepsEveryKind; the safety harness has a rolling
// restart phase).
//
// Restoring cannot make two holders. On a node, a restoring extension is an
// acquire with the lock's value (a SET where nothing is), and it is counted
// as an acquire is: the new validity runs ttl − drift from the start of the
// attempt that reached a quorum, and every key that attempt wrote or
// extended was written after that start with the whole ttl. So while a
// holder believes it holds the lock, its value is on a quorum of nodes; a
// second holder would need a second quorum, and the two share a node whose
// key would hold two values at once. The argument is the acquire's, with the
// same assumption: no majority of nodes loses its data within one ttl. A
// node that restarts early (before a ttl has passed) is no worse off than
// without restoring: the locks it forgot come back at their next
// extension, where before they stayed a node short until released.
//
// Two consequences. Deleting a held lock's keys by hand does not take it
// from a live holder: its next extension writes them back. Take it back
// with [Redlock.ForceRelease], which leaves tombstones that its extensions
// fail on ([Redlock.Inspect] shows who holds it, [WithIdentity]). And a won
// extension whose call was still parked on a silent node when the lock was
// released can land there after the release and hold that one node's key
// for the ttl: a minority, which no other acquire needs.
//
// A redis.ClusterClient or FailoverClient counts as one node; a redis.Ring
// is refused (it routes a script by its first key only). On a Cluster,
// the resources of one lock must share a hash slot (a hash tag such as
// "{orders}:1" and "{orders}:2"); otherwise the call ends at once with an
// error matching ErrInvalidArgument. Replication is asynchronous, so a failover can lose a lock
// that was only on the old primary; [WithReplicaAck] (WAIT) and [WithAOFAck]
// (WAITAOF) make a node's vote count only once its write has reached its
// replicas.
//
// # Leader election
//
// [Redlock.Election] names an election among candidates that use the same
// nodes; at most one leads at a time, under the assumptions of a lock.
// [Election.Campaign] blocks until the candidate leads and returns its
// [Term]; [Election.Lead] runs a function while leading and resigns when it
// returns. A term is a fenced lock on "redlock:election:" + name, extended
// as Using extends its lock, and its number ([Term.Number], [TokenFrom] in
// Lead's fn) is its fencing token: greater than every earlier term's, by the
// argument above. Once the term is granted, its first extension (at once)
// records value:term:id in "redlock:leader:{tag}:redlock:election:" + name
// on each node that holds its lock and announces the term on
// [ElectedChannel]; each later extension writes the record again where it
// is missing (a node that was slow, or lost it). [Election.Leader] reads
// the records: a candidate leads when a quorum of nodes hold both its lock
// and its record; [ErrNoLeader] when the nodes that answered rule every
// candidate out. [Election.Observe] reads the leader at each announcement
// and at least once a second, and sends each new term, in order.
//
// A term's context ([Term.Context]) ends before anyone else can lead: at
// [Term.Resign] before the release is sent (cause [ErrResigned]); when an
// extension finds the lock gone, or at the lock's cancel point, a quarter of
// the extension threshold (100ms at most) before its validity ends, when no
// extension got through by then (cause matching [ErrExtensionFailed]):
// before the validity by that margin, which covers late timers, and before
// the keys expire on the nodes by the drift allowance more; at [Redlock.Close]
// (cause [ErrClosed]). A successor needs a quorum of nodes free of the
// term's keys: after its release, or its expiry. So a resigned leader is
// followed within a few round trips (the waiting candidates wake on the
// release's announcement), and a dead one within its ttl plus a retry
// delay. As with any lock, a leader paused past its validity may still act
// for a moment when it wakes: fence its writes with the term's number.
//
// # Semaphores and shared locks
//
// [WithPermits](n) makes Acquire and Using take one of n permits of each
// resource, a counting semaphore; [WithShared] a shared (read) lock, held
// beside other shared locks and excluded by the exclusive lock. Extend,
// Release, waiting and the observer work on them as on the plain lock.
//
// Counting holders per node is not safe over a quorum for n ≥ 2 (holders
// granted on nodes {1,2,3}, {1,4,5} and {2,3,4} of 5 fit a count of 2 on
// every node). Here each permit is a lock on a key of its own, and an
// attempt wins when a quorum of nodes took the same permit (each node takes
// a free one in an order drawn from the attempt's value; a node that took
// another releases it at once): two holders of one permit would break the
// plain lock's mutual exclusion, so at most n hold a permit, under the same
// assumptions. A shared lock is a reader in a sorted set beside the
// resource; a reader's quorum and a writer's share a node, which refuses
// whichever came second. While permits or readers are held, the resource's
// own key holds a marker ("redlock:permits:n", "redlock:shared") that lives
// as long as the longest of them, so the exclusive lock waits, and a lock of
// another kind is refused with an error matching [ErrInvalidArgument]. An
// exclusive acquire that finds readers marks the key, and no new reader is
// granted there until the readers have left, or 2 s after the writer's last
// attempt: a writer is not starved, and one that gave up does not starve
// the readers.
//
// # Waiting
//
// A waiting Acquire wakes at the first announcement that one of its
// resources was released (the release script publishes on
// [ReleasedChannel]; on a Cluster, with sharded pub/sub in the resource's
// slot), or at its retry delay, whichever comes first ([WithWakeOnRelease]).
// The Acquires of one Redlock that wait for the same set of resources queue,
// first come first served: an announcement wakes the longest waiter of each
// set that includes the released resource, and a newcomer joins its set's
// queue before its first attempt. The
// Redlock subscribes on every node, one connection each (on a Cluster, one
// per resource waited for), when an Acquire first has to wait;
// [Redlock.Close] ends the subscriptions.
//
// # Contended locks
//
// Under contention a lock is handed over rather than released and fought
// for. In one process ([WithHandOver], on by default), a Release while an
// Acquire of the same Redlock waits for the same resources with the same
// ttl passes the lock to it with no round trip: the nodes keep the value,
// which becomes the waiter's. Mutual exclusion is the algorithm's: the
// nodes hold one value, which one holder at a time believes its own (the
// releasing holder's handles are spent before the waiter is told). Validity
// is the releasing holder's: the waiter's Lock expires when the releaser's
// newest handle would have (never later than every node of its quorum
// keeps the keys); no hand-over is made with less than half the ttl left,
// or while an Extend, which may shorten the keys' ttl, is in flight. A
// fenced lock gets a new token before the waiter runs: the old token + 1,
// written to a quorum of counters where the value is still held (one round
// trip); the argument of "Fencing tokens" holds for it, as the lock was held
// by a quorum throughout. After 16 hand-overs in a row, or 100ms from the
// nodes' grant, the lock is released for real.
//
// Across processes ([WithFairQueue], off by default), waiters queue on
// every node, ordered by when each began waiting, and a release hands each
// node's key to the head of its queue, setting it to the head's id for the
// head's ttl, and announces it. The head holds the lock once a quorum of
// nodes announced it, without asking. A node hands the key over at a time
// the head does not know, but after the node answered the head's last
// attempt with "queued" (an attempt that came after would have found the key
// held by the head's id, and voted for): so the head counts its validity
// from the start of that attempt on each node of its quorum, losing at most
// the time since (a waiter asks at least every third of a second), never
// counting time that a node does not. With less than half the ttl left so
// counted, it makes an attempt, which counts from its own start. A node
// missing a waiter from its queue (it was down when the waiter queued) may
// hand its key to a later waiter: each node's key holds one id or value at a
// time, so that costs order, never exclusion, and the next attempt of the
// earlier waiter queues it there in its place.
//
// # Concurrency
//
// A Redlock and a Lock are safe for concurrent use by multiple goroutines. A
// Redlock starts no goroutine in New. Its node workers end when their queue
// is empty (a worker parked on a node that does not answer, when the node
// answers or the client gives up); the subscription goroutines (one per
// node, started by the first Acquire that waits; on a Cluster, one per
// resource waited for, ended when its last waiter leaves) end with
// [Redlock.Close]. The clients belong to the caller, who closes them.
//
// # Observability
//
// [WithObserver] gives an [Observer] every attempt, pause, vote against, call
// outcome, release (with its hold time), lost lock and Using; the module
// github.com/go-redlock/redlock/redlockotel records them as OpenTelemetry
// spans and metrics. [WithErrorHandler] stays, as node-redlock's "error"
// event.
//
// # Contributing
//
// CONTRIBUTING.md in the repository says which file holds what (redlock.go
// the API, kind.go the primitives' seam and one file per primitive,
// plan.go the operations, engine.go the retry loop, quorum.go the attempt
// and the vote, votes.go what a node's answer votes; under
// internal/, lane the nodes, their lanes and breakers, script the Lua, wake
// the waiters), what each package may import, and how to run the tests, the
// safety harness and the benchmarks.
//
// # From node-redlock
//
//	new Redlock(clients, settings)      New(clients, opts...)
//	redlock.acquire(resources, ms, s)   rl.Acquire(ctx, resources, ttl, opts...)
//	redlock.extend(lock, ms, s)         rl.Extend(ctx, lock, ttl, opts...) / lock.Extend(ctx, ttl, opts...)
//	redlock.release(lock, s)            rl.Release(ctx, lock, opts...) / lock.Release(ctx, opts...)
//	settings.driftFactor etc.           WithDriftFactor, WithRetryCount, WithRetryDelay, WithRetryJitter,
//	                                    WithAutomaticExtensionThreshold
//	redlock.using(res, ms, s, routine)  rl.Using(ctx, res, ttl, fn, opts...)
//	signal.aborted / signal.error       ctx.Done() / context.Cause(ctx)
//	redlock.on("error", fn)             WithErrorHandler(fn)
//	ExecutionError / ResourceLockedError  *ExecutionError / *ResourceLockedError
//	lock.attempts, lock.expiration      lock.Attempts(), lock.Expiration()
package redlock
