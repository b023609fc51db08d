// Package redlocktest gives tests of code that takes redlock locks a set of
// Redis nodes that need no Redis server, and the faults to test it under,
// as net/http/httptest does for HTTP. Each node is an in-memory
// [miniredis] server on loopback, behind a small proxy of this package that
// makes it crash ([Nodes.Down]), hang ([Nodes.Hang]), come back
// ([Nodes.Heal]) or forget its keys ([Nodes.Restart]); [Nodes.Lose] takes a
// lock from its holder, as an operator or another process would.
//
// A test of a function that exports a report under a lock, and must stop
// when the lock is lost (the function is in the example of [Nodes.Lose]):
//
//	func TestExportStopsWhenItsLockIsLost(t *testing.T) {
//		nodes := redlocktest.New(t, 3) // stopped when the test ends
//		// What main does with redlock.Open(os.Getenv("REDLOCK_NODES")). A short
//		// threshold, so that a 300ms lock is extended, and its loss seen, early.
//		rl, err := redlock.Open(nodes.List(), redlock.WithAutomaticExtensionThreshold(150*time.Millisecond))
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { _ = rl.Close() }) // runs before the nodes stop
//
//		nodes.Down(2) // a crashed node: 2 of 3 still make a quorum
//		rows, calls := make([]string, 1000), 0
//		write := func(string) error {
//			calls++
//			if calls == 2 { // the lock is taken away during the export
//				if err := nodes.Lose("report:daily"); err != nil {
//					return err
//				}
//			}
//			time.Sleep(10 * time.Millisecond) // a slow write
//			return nil
//		}
//		n, err := exportReport(context.Background(), rl, 300*time.Millisecond, rows, write)
//		if n == len(rows) || !errors.Is(err, redlock.ErrExtensionFailed) {
//			t.Errorf("exportReport = %d rows, %v; want it stopped early by the lost lock", n, err)
//		}
//	}
//
// # The nodes
//
// [Start] (or [New] in a test) starts n independent nodes. [Nodes.List]
// gives their addresses as [redlock.Open] and the redlock command's
// --nodes take them; [Nodes.Clients] gives a go-redis client per node, for
// [redlock.New]. Every address is a proxy's, and stays the node's through
// every fault, so a Redlock made once sees a node go down and come back.
// Keys with a ttl expire in real time, as on a real server: a holder that
// never releases its lock loses it after its ttl. [Nodes.Close] stops
// everything at once, whatever the faults, and leaves no goroutine behind.
//
// The faults act as on a real node. A node that is down refuses
// connections: redlock's calls to it fail at once, or at the node timeout
// while go-redis retries its dial; the clients of [Nodes.Clients], like
// those [redlock.Open] makes, make go-redis log nothing of it (a client
// of your own does: [redis.SetLogger]). A hung node takes
// connections and requests and never answers: a call to it ends at the
// caller's node timeout ([redlock.WithNodeTimeout], 100ms by default; an
// Acquire that fails waits one more for its cleanup there, and a call that
// must open a connection to a hung node, its client's first or one more
// while the others are parked there, waits up to 5 node timeouts, what
// redlock gives a connection's set-up). A [redlock.Redlock.Close] made
// while a node hangs waits for the calls parked on it, up to a second (two
// node timeouts, when longer):
// Heal the node first, or let [Nodes.Close] cut them. A node restarted
// with [Nodes.Restart] is empty, and redlock's next extension of a held
// lock writes its keys there again, so the lock stays held.
//
// # What miniredis does not do
//
// The nodes are plain servers: a Redis Cluster (redis.ClusterClient, hash
// slots, sharded pub/sub) and Sentinel are not there. WAIT answers 0
// replicas and WAITAOF is an unknown command, so every vote of a lock with
// [redlock.WithReplicaAck] or [redlock.WithAOFAck] is against it. INFO
// server has no run_id, so redlock cannot tell one server reached by two
// names (each node here is its own server, so nothing is lost). There is
// no persistence. miniredis hashes every script with SHA-1, so under
// GODEBUG=fips140=only a node panics at the first script. Every kind of lock (fenced, semaphore,
// shared, fair queue, election), waking on release, Inspect and
// ForceRelease work as on redis-server.
//
// [miniredis]: https://github.com/alicebob/miniredis
package redlocktest
