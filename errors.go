package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/pause"
	"github.com/go-redlock/redlock/internal/script"
)

// Sentinel errors that callers branch on with [errors.Is].
var (
	// ErrResourceLocked reports that a quorum could not be reached because
	// enough nodes were held by another lock: the resources are contended.
	// A quorum lost to node failures (timeouts, refused connections, Redis
	// errors) does not match it.
	ErrResourceLocked = errors.New("redlock: resource locked")

	// ErrLockExpired reports that a lock cannot be extended or released
	// because its validity has passed, a quorum of nodes no longer holds its
	// value, or the Lock was already released or extended (a spent handle).
	ErrLockExpired = errors.New("redlock: lock expired")

	// ErrInvalidArgument is matched by every error that rejects bad input
	// before anything is sent to Redis: no clients or 2 (see [New]), a nil
	// client, a bad ttl, empty or duplicate resources, an out-of-range
	// option, a nil Lock.
	ErrInvalidArgument = errors.New("redlock: invalid argument")

	// ErrExtensionFailed is the cause with which [Redlock.Using] cancels the
	// routine's context when the lock could not be extended (and the
	// election a [Term]'s context), and is matched by the error Using (or
	// [Election.Lead]) returns in that case.
	ErrExtensionFailed = errors.New("redlock: extension failed")

	// ErrNotHeld reports that [Redlock.ForceRelease] found none of the
	// values it was given on any node: nothing was released.
	ErrNotHeld = errors.New("redlock: not held")

	// ErrClosed is matched by the error of every call that takes something
	// new (Acquire, Using, a campaign, a read or a take-back) once the
	// Redlock is closed, returned before anything is sent (see
	// [Redlock.Close]); by an Acquire that was waiting when Close came,
	// which ends at once, having taken nothing; and it is the cause of a
	// [Term]'s context that Close ended.
	ErrClosed = errors.New("redlock: the Redlock was closed")
)

// Op names one of the operations the engine runs on every node.
type Op string

// The operations, as they appear in [NodeError] and [ExecutionError].
// OpFence is the second round of a fenced Acquire (see [WithFencing]), the
// write-back of its token; it appears in NodeErrors only, the Acquire's
// ExecutionError says OpAcquire.
const (
	OpAcquire Op = "acquire"
	OpExtend  Op = "extend"
	OpRelease Op = "release"
	OpFence   Op = "fence"
)

// ResourceLockedError is a node's vote against when its script ran but did
// not apply to every requested resource: for acquire, another lock holds one
// of them; for extend and release, this lock's value is no longer there.
// It is the Go form of node-redlock's ResourceLockedError.
//
// For OpAcquire it matches [ErrResourceLocked]; for OpExtend and OpRelease it
// matches [ErrLockExpired].
type ResourceLockedError struct {
	Op        Op
	Applied   int64  // how many resources the script applied to on that node
	Requested int    // how many resources were requested
	split     bool   // a semaphore's node that took other permits than the quorum's
	full      bool   // a semaphore's node with every permit taken
	restored  bool   // an extension's node that had lost the lock's keys, and got them written back
	holder    string // an acquire's node: the start of the value that holds a key (script.Reply.Holder), when it says
}

// Error implements the error interface.
func (e *ResourceLockedError) Error() string {
	switch {
	case e.split:
		return "took other permits than the quorum's (contenders split the nodes)"
	case e.full:
		return "every permit taken"
	case e.Op == OpAcquire:
		return "held by another lock"
	case e.restored:
		return "had lost the lock's keys (written back there, which is not a vote: only a node that still held the lock counts)"
	case e.Applied > 0:
		return fmt.Sprintf("no longer held by this lock on %d of its %d resources", int64(e.Requested)-e.Applied, e.Requested)
	}
	return "no longer held by this lock"
}

// Unwrap returns the sentinel that this vote stands for.
func (e *ResourceLockedError) Unwrap() error {
	if e.Op == OpAcquire {
		return ErrResourceLocked
	}
	return ErrLockExpired
}

// NodeError is one node's vote against in one attempt: the node's index in
// the clients given to [New], the operation, and what went wrong there (a
// *ResourceLockedError, a Redis or network error, or a [*NodeTimeoutError]).
// It is what the handler given to [WithErrorHandler] receives.
type NodeError struct {
	Node int // the node's index into the clients given to New
	// Addr names the node for people: its address as its client has it
	// ("host:port", with "/db" for a database other than 0; a Cluster's
	// seed addresses, "sentinel failover group" for a FailoverClient),
	// never a password.
	Addr string
	Op   Op
	Err  error
}

// Error implements the error interface.
func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: %s on %s: %v", e.Op, e.node(), e.Err)
}

// node names the node: "node 1 (127.0.0.1:7001)", or "node 1" when its
// address is not known.
func (e *NodeError) node() string {
	if e.Addr == "" {
		return fmt.Sprintf("node %d", e.Node)
	}
	return fmt.Sprintf("node %d (%s)", e.Node, e.Addr)
}

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// NodeTimeoutError is the vote recorded for a node that did not answer within
// the per-node timeout ([WithNodeTimeout]), or whose call was not sent
// because the node (on a Cluster, the shard) went silent past that timeout
// recently. Its circuit is open then: calls to it fail at once until one
// node timeout has passed, when a single call is sent as a probe.
//
// It never matches context.DeadlineExceeded, even when the client noticed the
// deadline first: a node's silence is not the caller's ctx ending.
type NodeTimeoutError struct {
	// Timeout is the node timeout that passed.
	Timeout time.Duration
	// CircuitOpen is set when the call was not sent at all.
	CircuitOpen bool
	// Shard is the address of the Cluster shard primary that did not
	// answer; empty for a node that is one server.
	Shard string
	// Cause is what the client said: its own timeout when it gave up by
	// itself, or the network error it last gave for this node (a refused
	// connection, an address that does not resolve) since the node last
	// answered; nil when nothing is known. The client may take longer than
	// the node timeout to say it (go-redis retries a dial for about 1.7s),
	// so the first attempts on a node that is down may not know it yet. It
	// is kept for the text and not unwrapped.
	Cause error
	// RoundTrip is how long the node's last answer took, when that is
	// above Timeout: the node is farther away than the timeout allows, and
	// WithNodeTimeout should be raised above its round trip. 0 when not
	// known or not above.
	RoundTrip time.Duration
	// Paused is how long this process itself was paused while it waited
	// (a long garbage collection, a stopped or starved process); at most 4
	// node timeouts of it were waited out on top of Timeout. 0 when none.
	Paused time.Duration

	validity bool // Timeout was the lock's validity (ttl − drift), shorter than the node timeout
	setUp    bool // Timeout was the lock's validity, which passed while the lane set up a connection
	// connecting: Timeout was the wait for a connection's set-up
	// (lane.SetUpWait node timeouts), which the lane gave up.
	connecting bool
}

// Error implements the error interface.
func (e *NodeTimeoutError) Error() string {
	var b strings.Builder
	if e.Shard != "" {
		fmt.Fprintf(&b, "shard %s: ", e.Shard)
	}
	switch {
	case e.CircuitOpen:
		fmt.Fprintf(&b, "not sent: no answer within %v (WithNodeTimeout) lately", e.Timeout)
	case e.connecting:
		fmt.Fprintf(&b, "no connection set up within %v: check that the node is up and that this host reaches it (address, port, firewall, TLS); "+
			"for a node far away, raise WithNodeTimeout (a connection's set-up gets %d node timeouts, one once the node was found slow)", e.Timeout, lane.SetUpWait)
	case e.setUp:
		fmt.Fprintf(&b, "no answer within %v, the lock's validity (ttl − drift), while the client was still setting up a connection (dialing, the handshake: bounded by the client's DialTimeout)", e.Timeout)
	case e.validity:
		fmt.Fprintf(&b, "no answer within %v, the lock's validity (ttl − drift, shorter than WithNodeTimeout)", e.Timeout)
	default:
		fmt.Fprintf(&b, "no answer within %v (WithNodeTimeout)", e.Timeout)
	}
	switch {
	case e.Cause == nil || errors.Is(e.Cause, context.DeadlineExceeded):
	case lane.IsTimeout(e.Cause):
		fmt.Fprintf(&b, "; the client gave up first: %v", e.Cause)
	default:
		fmt.Fprintf(&b, "; the client said: %v", e.Cause)
	}
	if e.CircuitOpen {
		fmt.Fprintf(&b, "; one call tries it again every %v", e.Timeout)
	}
	if e.Paused >= time.Millisecond {
		fmt.Fprintf(&b, "; this process was paused %v meanwhile (a long garbage collection, a stopped or starved process), of which at most %d node timeouts are waited out", e.Paused.Truncate(time.Millisecond), pause.MaxTimes)
	}
	if e.RoundTrip > e.Timeout {
		fmt.Fprintf(&b, "; its last answer took %v: the node's round trip is above the node timeout, raise WithNodeTimeout above it", e.RoundTrip.Truncate(time.Millisecond))
	}
	return b.String()
}

// ExecutionError is returned by Acquire, Extend and Release when the
// operation did not reach a quorum. Attempts holds each attempt's statistics
// (only the last one when retries are unlimited).
//
// It matches [ErrResourceLocked] when the last whole attempt was lost to
// other holders, [ErrLockExpired] when the lock is no longer held, ctx's
// error when ctx cut the call short, and [ErrInvalidArgument] when the nodes
// refused the resources (CROSSSLOT). A refusal that retrying cannot fix
// (NOAUTH, WRONGPASS, NOPERM, WRONGTYPE, a resource held as another kind, an
// unknown command, DENIED) ends the call at once, and the error unwraps to
// that node's [*NodeError] too; network errors and transient refusals
// (READONLY, LOADING, BUSY, OOM, ...) are retried.
type ExecutionError struct {
	Op        Op
	Resources []string
	Attempts  []ExecutionStats

	reason   string       // what happened, in words
	sentinel error        // ErrResourceLocked, ErrLockExpired, ErrInvalidArgument or nil
	ctxErr   error        // ctx.Err() when ctx ended the call
	refusal  *NodeError   // a node's refusal that ended the call
	against  []*NodeError // the votes against of the attempt that reason describes
	tries    int          // attempts made (Attempts keeps only the last with unlimited retries)
	afterCtx bool         // a Release's one attempt after its ctx had ended
	took     time.Duration
}

// Error implements the error interface.
func (e *ExecutionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %q: ", e.Op, e.Resources)
	switch {
	case e.afterCtx:
		fmt.Fprintf(&b, "ctx had ended (%v) before the release; the one attempt made after it: %s", e.ctxErr, e.reason)
	case e.ctxErr != nil && e.tries == 0:
		fmt.Fprintf(&b, "not attempted: %v", e.ctxErr)
	case e.ctxErr != nil:
		fmt.Fprintf(&b, "%v after %s", e.ctxErr, e.attempts())
		if e.reason != "cut short" {
			fmt.Fprintf(&b, "; last whole attempt: %s", e.reason)
		}
	default:
		b.WriteString(e.reason)
		if e.tries > 1 {
			fmt.Fprintf(&b, ", after %s", e.attempts())
		}
	}
	// The votes against that the reason does not count already.
	counted := e.sentinel == ErrResourceLocked || e.sentinel == ErrLockExpired
	for _, v := range e.against {
		if v == e.refusal || counted && isLocked(v.Err) ||
			errors.Is(v.Err, context.Canceled) || errors.Is(v.Err, context.DeadlineExceeded) {
			continue
		}
		fmt.Fprintf(&b, "; %s: %v", v.node(), v.Err)
	}
	return b.String()
}

// attempts says how many attempts were made, and in how long.
func (e *ExecutionError) attempts() string {
	if e.tries == 1 {
		return fmt.Sprintf("1 attempt in %v", e.took.Round(time.Millisecond))
	}
	return fmt.Sprintf("%d attempts in %v", e.tries, e.took.Round(time.Millisecond))
}

// Unwrap returns the sentinel, the context error and the refusal this error
// matches. Other per-node errors are not unwrapped (so that a node's own
// timeout never passes for the caller's); they are in Attempts.
func (e *ExecutionError) Unwrap() []error {
	errs := make([]error, 0, 3)
	if e.sentinel != nil {
		errs = append(errs, e.sentinel)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	if e.refusal != nil {
		errs = append(errs, e.refusal)
	}
	return errs
}

// ExecutionStats describes one attempt of an operation on every node.
//
// An attempt is decided as soon as its outcome is certain: when a quorum has
// voted for, or when so many have voted against that a quorum is out of
// reach. Nodes that had not answered by then are in neither list; their
// answers still reach the [WithErrorHandler] handler when they come.
type ExecutionStats struct {
	// Start is when the attempt began; a successful lock's expiration is
	// counted from it.
	Start time.Time
	// MembershipSize is the number of nodes, QuorumSize n/2+1.
	MembershipSize int
	QuorumSize     int
	// VotesFor lists the indexes (into the clients given to New) of the
	// nodes that voted for, in the order their answers arrived.
	VotesFor []int
	// VotesAgainst holds each vote against, with its reason.
	//
	// For a fenced Acquire ([WithFencing]) whose first round reached a
	// quorum, VotesFor and VotesAgainst are those of the second round, the
	// write-back of its token, whose quorum grants the lock.
	VotesAgainst []*NodeError
	// Late reports that a quorum voted for, but only after the lock's
	// validity had passed, so the attempt counted as a failure.
	Late bool
	// ReplicaAcks holds, with [WithReplicaAck] or [WithAOFAck], how many
	// replicas each node's write reached (indexed like the clients given
	// to New; -1 when not known: no answer, or the script failed); nil
	// without those options, and for releases.
	ReplicaAcks []int

	token  uint64     // a fenced attempt whose first round reached a quorum: its token
	fence  fenceRound // and what became of its write-back
	choice string     // an attempt with choices that won: its quorum's choice (a semaphore's permits)
}

// ExecutionResult is what a successful Release returns.
type ExecutionResult struct {
	// Attempts holds the statistics of each attempt (only the last one when
	// retries are unlimited).
	Attempts []ExecutionStats
	// Start is when the successful attempt began, or when the lock was
	// handed over.
	Start time.Time
	// HandedOver is set when the Release passed the lock to a waiting
	// Acquire of the same Redlock instead of releasing it (see
	// [WithHandOver]): nothing was sent, and Attempts is empty.
	HandedOver bool
}

// fenceRound is what became of a fenced attempt's write-back.
type fenceRound uint8

const (
	fenceNone    fenceRound = iota // not fenced, or the first round failed
	fenceSent                      // sent: the votes are the write-back's
	fenceTooLate                   // not sent: no validity was left after the first round
)

// invalid returns an error matching ErrInvalidArgument whose text names what
// was wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// isLocked reports whether err is a node's "held by another" (acquire) or
// "no longer ours" (extend, release).
func isLocked(err error) bool {
	_, ok := err.(*ResourceLockedError)
	return ok
}

// tally describes a failed attempt: by its "held by another" votes (held;
// full of them a semaphore's "every permit taken") when they alone keep it
// from a quorum, else by its votes for. The counts are of the answers heard
// before the outcome was certain: the nodes not waited for are said.
func tally(op Op, st ExecutionStats, held, full int) string {
	n, q := st.MembershipSize, st.QuorumSize
	unheard := ""
	if u := n - len(st.VotesFor) - len(st.VotesAgainst); u > 0 {
		unheard = fmt.Sprintf("; %d not waited for once that decided it", u)
	}
	switch {
	case held > n-q && op == OpAcquire && full == held:
		return fmt.Sprintf("full: every permit taken on %d of %d nodes (quorum %d%s)", held, n, q, unheard)
	case held > n-q && op == OpAcquire:
		return fmt.Sprintf("held by another lock on %d of %d nodes (quorum %d%s)", held, n, q, unheard)
	case held > n-q:
		return fmt.Sprintf("no longer held: the lock's value is gone from %d of %d nodes (quorum %d%s)", held, n, q, unheard)
	case st.fence == fenceTooLate:
		return fmt.Sprintf("a quorum voted for (%d of %d nodes) with less than 1ms of the lock's validity left: too late to write its fencing token back", len(st.VotesFor), n)
	case st.fence == fenceSent && st.Late:
		return fmt.Sprintf("fencing token %d was written back on a quorum only after the lock's validity had passed (%d of %d nodes)", st.token, len(st.VotesFor), n)
	case st.fence == fenceSent:
		return fmt.Sprintf("fencing token %d was written back on %d of %d nodes, %d needed", st.token, len(st.VotesFor), n, q)
	case st.Late:
		return fmt.Sprintf("a quorum voted for only after the lock's validity had passed (%d of %d nodes)", len(st.VotesFor), n)
	}
	if unheard != "" {
		unheard = fmt.Sprintf(" (%d voted against%s)", len(st.VotesAgainst), unheard)
	}
	return fmt.Sprintf("no quorum: %d of %d nodes voted for, %d needed%s", len(st.VotesFor), n, q, unheard)
}

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
	"WAIT with WithReplicaAck, WAITAOF with WithAOFAck. Allow PUBLISH (SPUBLISH on a Cluster) too, or waiters wake only at their retry delay, " +
	"and MGET and TYPE, or extensions due together go one script call each"

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
// error, or "@user_script:4: " before an error reply such as WRONGTYPE;
// "@user_script: 4: " alone when the script caught it, as ExtendMany does,
// and answered it).
func scriptError(msg string) string {
	rest, ok := strings.CutPrefix(msg, "ERR Error running script (call to f_")
	switch {
	case ok:
		if _, after, ok := strings.Cut(rest, "): "); ok {
			rest = after
		}
	case strings.HasPrefix(msg, "@user_script"):
		// A command's error that a script caught (redis.pcall) and
		// answered, as Redis 6.2 words it: "@user_script: 28: " before it.
	default:
		return msg
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
