package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
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
	// before anything is sent to Redis: no clients, a nil client, a bad ttl,
	// empty or duplicate resources, an out-of-range option, a nil Lock.
	ErrInvalidArgument = errors.New("redlock: invalid argument")

	// ErrExtensionFailed is the cause with which [Redlock.Using] cancels the
	// routine's context when the lock could not be extended, and is matched
	// by the error Using returns in that case.
	ErrExtensionFailed = errors.New("redlock: extension failed")
)

// invalid returns an error matching ErrInvalidArgument whose text names what
// was wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Op names one of the three operations the engine runs on every node.
type Op string

// The operations, as they appear in [NodeError] and [ExecutionError].
const (
	OpAcquire Op = "acquire"
	OpExtend  Op = "extend"
	OpRelease Op = "release"
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
}

// Error implements the error interface.
func (e *ResourceLockedError) Error() string {
	return fmt.Sprintf("the operation was applied to: %d of the %d requested resources", e.Applied, e.Requested)
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
	Node int
	Op   Op
	Err  error
}

// Error implements the error interface.
func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock: %s on node %d: %v", e.Op, e.Node, e.Err)
}

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// NodeTimeoutError is the vote recorded for a node that did not answer within
// the per-node timeout ([WithNodeTimeout]), or whose call was not sent
// because the node (on a Cluster, the shard) went silent past that timeout
// recently: its circuit is open, and calls to it fail at once until one node
// timeout has passed, when a single call is sent as a probe.
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
	// Cause is what the client said when it gave up by itself (its own
	// read timeout, say); nil when redlock's timer ran out first. It is
	// kept for the text and not unwrapped.
	Cause error
}

// Error implements the error interface.
func (e *NodeTimeoutError) Error() string {
	var b strings.Builder
	if e.Shard != "" {
		fmt.Fprintf(&b, "shard %s: ", e.Shard)
	}
	if e.CircuitOpen {
		fmt.Fprintf(&b, "not sent: no answer within %v (WithNodeTimeout) recently; one call is tried again %v after the silence", e.Timeout, e.Timeout)
	} else {
		fmt.Fprintf(&b, "no answer within %v (WithNodeTimeout)", e.Timeout)
	}
	if e.Cause != nil && !errors.Is(e.Cause, context.DeadlineExceeded) {
		fmt.Fprintf(&b, " (client: %v)", e.Cause)
	}
	return b.String()
}

// ExecutionError is returned by Acquire, Extend and Release when the
// operation did not reach a quorum. Attempts holds the statistics of each
// attempt (only the last one when retries are unlimited).
//
// It matches [ErrResourceLocked] when the last attempt that ctx did not cut
// short was lost to other holders, [ErrLockExpired] when the lock is no
// longer held, and the context's error when the call was cut short by ctx. A quorum lost to node
// failures matches neither sentinel; the node errors are in Attempts.
type ExecutionError struct {
	Op        Op
	Resources []string
	Attempts  []ExecutionStats

	reason   string // what happened, in words
	sentinel error  // ErrResourceLocked, ErrLockExpired or nil
	ctxErr   error  // ctx.Err() when ctx ended the call
}

// Error implements the error interface.
func (e *ExecutionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %q: %s", e.Op, e.Resources, e.reason)
	if e.ctxErr != nil {
		fmt.Fprintf(&b, ": %v", e.ctxErr)
	}
	if n := len(e.Attempts); n > 0 {
		last := e.Attempts[n-1]
		fmt.Fprintf(&b, " (last attempt: %d for, %d against of %d nodes, quorum %d",
			len(last.VotesFor), len(last.VotesAgainst), last.MembershipSize, last.QuorumSize)
		if last.Late {
			b.WriteString(", validity passed before the quorum")
		}
		for _, v := range last.VotesAgainst {
			fmt.Fprintf(&b, "; node %d: %v", v.Node, v.Err)
		}
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the sentinel and the context error this error matches.
// Per-node errors are not unwrapped (so that a node's own timeout never
// passes for the caller's); they are in Attempts.
func (e *ExecutionError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.sentinel != nil {
		errs = append(errs, e.sentinel)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	return errs
}
