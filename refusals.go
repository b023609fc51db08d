package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/script"
)

// A refusal is a node's error reply that retrying cannot change: the
// client's configuration, the server's, or the request itself is wrong.
type refusal struct {
	prefix   string // the reply's first word or words
	what     string // what to do about it
	badInput bool   // the caller's request: matches ErrInvalidArgument
}

// aclRemedy is what to do about an ACL that forbids what a lock runs (the
// commands the scripts call; PUBLISH and SPUBLISH are called so that a
// refusal only costs the waiters their wake-up).
const aclRemedy = "the client's ACL user may not run what a lock needs: EVALSHA and EVAL; from the scripts GET, SET, DEL, " +
	"PTTL, PEXPIRE and TIME on the lock's keys, and ZADD, ZREM, ZRANGE, ZRANGEBYSCORE, ZREMRANGEBYSCORE, ZSCORE and ZCOUNT " +
	"on its redlock:* keys (fencing counters " + script.FencePrefix + "*, semaphores, shared locks, fair queues, elections); " +
	"WAIT with WithReplicaAck, WAITAOF with WithAOFAck. Allow PUBLISH (SPUBLISH on a Cluster) too, or waiters wake only at their retry delay"

// refusals are the error replies that end a call at once when they keep it
// from a quorum. Replies that a failover, a restart or time can change
// (READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, BUSY, OOM, MISCONF,
// max clients) are retried, as are network errors.
var refusals = []refusal{
	{prefix: "NOAUTH", what: "the node requires a password: set Password (and Username, for an ACL user) in the client's options"},
	{prefix: "WRONGPASS", what: "the client's Username or Password is wrong for this node, or the user is disabled"},
	{prefix: "NOPERM", what: aclRemedy},
	{prefix: "ERR The user executing the script can't run this command", what: aclRemedy}, // Redis 7.0
	{prefix: "ERR ACL failure in script", what: aclRemedy},                                // Redis 7.2, Valkey
	{prefix: "WRONGTYPE", what: "a resource (or, with WithFencing, its counter " + script.FencePrefix + "{...}:resource) names a key that holds other data: " +
		"give locks keys of their own (a prefix such as \"lock:\")"},
	{prefix: script.ExhaustedCounter, what: "the counter reached 2^53-1, the largest token redlock can draw (Lua's numbers are doubles): " +
		"the protected resource must be moved to a new resource name"},
	{prefix: script.BadCounter, what: "that key is a fencing counter's name (WithFencing) but holds something else: give locks keys of their own, " +
		"and never write to " + script.FencePrefix + "* keys"},
	{prefix: script.MixedKinds, badInput: true, what: "every user of a resource must take the same kind of lock: the same WithPermits(n), " +
		"or WithShared(true) and the exclusive lock, never a semaphore and a shared lock"},
	{prefix: "CROSSSLOT", badInput: true, what: "on a Redis Cluster the resources of one lock must be in one hash slot: " +
		"give them a common hash tag, such as \"{orders}:1\" and \"{orders}:2\""},
	{prefix: "ERR unknown command", what: "the node does not run Lua scripts (EVALSHA or EVAL renamed or disabled), which redlock needs"},
	{prefix: "DENIED", what: "the node refuses remote clients (protected mode): set a password or bind it to the clients' network"},
}

// refused returns the refusal that err is, or nil.
func refused(err error) *refusal {
	var ue *lane.UnsupportedError
	if errors.As(err, &ue) {
		return &refusal{prefix: "ERR unknown command", what: unsupported(ue)}
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return nil
	}
	msg := scriptError(re.Error())
	for i := range refusals {
		if strings.HasPrefix(msg, refusals[i].prefix) {
			return &refusals[i]
		}
	}
	return nil
}

// unsupported says what to do about a node that does not know the command
// that WithReplicaAck (WAIT) or WithAOFAck (WAITAOF) sends.
func unsupported(ue *lane.UnsupportedError) string {
	server := "the node's server (which did not say its version)"
	if ue.Server != "" {
		server = "the node (" + ue.Server + ")"
	}
	option := "WithReplicaAck"
	if ue.Command == "WAITAOF" {
		option = "WithAOFAck"
	}
	if ue.Disabled {
		return fmt.Sprintf("%s has %s renamed or disabled (rename-command), which %s needs: "+
			"allow it on the node, or do without %s", server, ue.Command, option, option)
	}
	return fmt.Sprintf("%s lacks %s, which %s needs and Redis 7.2 and Valkey 7.2 added: "+
		"upgrade the node, or wait for replicas with WithReplicaAck (WAIT)", server, ue.Command, option)
}

// scriptError returns the error a script's command raised, without the
// words Redis 6.2 wraps it in ("ERR Error running script (call to
// f_<sha>): @user_script:4: @user_script: 4: " before the command's own
// error, or "@user_script:4: " before an error reply such as WRONGTYPE).
func scriptError(msg string) string {
	rest, ok := strings.CutPrefix(msg, "ERR Error running script (call to f_")
	if !ok {
		return msg
	}
	if _, after, ok := strings.Cut(rest, "): "); ok {
		rest = after
	}
	for _, p := range []string{"@user_script:", "@user_script: "} {
		if r, ok := strings.CutPrefix(rest, p); ok {
			if _, after, ok := strings.Cut(r, ": "); ok {
				rest = after
			}
		}
	}
	if strings.HasPrefix(rest, "The user executing the script") {
		rest = "ERR " + rest // the words 7.0 gives it, after its "ERR "
	}
	return rest
}

// refusalError ends a call that count of n nodes refused, ne first.
func refusalError(ne *NodeError, count, n int, against []*NodeError) *ExecutionError {
	rf := refused(ne.Err)
	e := &ExecutionError{refusal: ne, against: against,
		reason: fmt.Sprintf("refused by %d of %d nodes, which retrying cannot fix: %s answered %q: %s", count, n, ne.node(), ne.Err.Error(), rf.what)}
	if rf.badInput {
		e.sentinel = ErrInvalidArgument
	}
	return e
}
