package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-redlock/redlock/internal/lane"
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

// invalid returns an error matching ErrInvalidArgument whose text names what
// was wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

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
	Applied   int64 // how many resources the script applied to on that node
	Requested int   // how many resources were requested
	split     bool  // a semaphore's node that took other permits than the quorum's
	full      bool  // a semaphore's node with every permit taken
	restored  bool  // an extension's node that had lost the lock's keys, and got them written back
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

// isLocked reports whether err is a node's "held by another" (acquire) or
// "no longer ours" (extend, release).
func isLocked(err error) bool {
	_, ok := err.(*ResourceLockedError)
	return ok
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
