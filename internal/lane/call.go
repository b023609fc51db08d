// Package lane sends script calls to Redis nodes: per server (or Cluster
// shard) a queue, at most one worker sending it in pipelined batches, and a
// circuit breaker that keeps a silent node from holding up or parking more
// than a few goroutines. It knows nothing of votes, quorums or locks: a call
// is plain data with a [Handler], told whether the call is still worth
// sending, and what became of it. It imports nothing of redlock's.
//
// # How a call to one node lives and ends
//
// A node is one member of the quorum. It sends its calls through lanes, one
// per connection pool that really is one server: a redis.Client (or a
// FailoverClient) has one lane; a ClusterClient has one per shard primary,
// so that a hung shard holds up only the calls to its own slots. (Each has
// a twin for calls that wait for replicas: see [Node.Lane].)
//
//  1. Submit. An open lane refuses a call at once: its Handler's Done gets a
//     *TimeoutError with CircuitOpen, nothing sent. Otherwise the call
//     queues, and a worker is started if none runs. A queued call is a few
//     words of memory, not a goroutine.
//  2. Send. The worker takes the whole queue (a single call, alone, when
//     half-open). On a lane with no connection known to work it first sets
//     one up (see setup.go), bounded by the client's dial timeout rather
//     than the node timeout, telling the calls (Connector). It drops the
//     Write calls whose Sendable says no. Releases
//     are always sent. The rest go out in one pipeline with a deadline of
//     one node timeout from now, which no caller's ctx can cut short; each
//     call by its script's hash (EVALSHA), or with the script itself (EVAL)
//     when the server is not known to have it since the set-up. A node
//     that lacks a script answers NOSCRIPT to its calls, which did not run;
//     they go again with the script, in the batch's order, together with
//     the later calls that ran on their keys too early (see resends).
//  3. Done. Each call's Result goes to its Handler's Done, once.
//  4. Silence. A watchdog fires when a batch has no answer after its node
//     timeout, a pause of this process's own not counted (pause.Wait). It
//     opens the breaker, tells each call's Handler (Silent: the
//     call's Done follows when the client returns), fails the queued calls
//     (a release is held instead, and sent again as soon as the node answers
//     anything: a slow node still gets its releases), and detaches the
//     worker, which stays parked in the client until the node answers or
//     the client gives up. Only a node's own silence opens its breaker: a
//     caller that gives up early, or a call that waited in the queue behind
//     a busy node, says nothing about the node's health.
//
// The breaker's states:
//
//	closed    calls are queued and sent in batches.
//	open      the lane was silent past a node timeout: calls fail at once,
//	          until retryAt (one node timeout later) and only while fewer than
//	          MaxParked workers are parked on the lane.
//	half-open the next call is sent alone, as a probe; calls that come
//	          while it is out fail at once, as when open.
//
//	closed    -> open       a batch was silent past its node timeout
//	open      -> half-open  retryAt passed and fewer than MaxParked are parked,
//	                        or a parked batch came back with an answer
//	half-open -> closed     the probe was answered (any answer, even an error reply)
//	half-open -> open       the probe was silent too
//
// So a node that does not answer holds at most MaxParked goroutines of this
// package, however many calls are made meanwhile; a node that answers within
// the node timeout is never opened, however many callers gave up on it.
package lane

import (
	"fmt"
	"time"

	"github.com/go-redlock/redlock/driver"
)

// Kind is what a call does, as far as sending it goes.
type Kind uint8

const (
	// Write writes (acquire, extend, a fencing write-back): sent only while
	// its Handler's Sendable says so; after a silence, never sent again.
	Write Kind = iota
	// Release deletes only its own value, so it may run in any order and
	// more than once: it is always sent, and when it gets no reply, its
	// Handler's Done gets the failure and its Held copy is held and sent
	// again when the node answers.
	Release
	// Cleanup is a release of its own (a failed attempt's, or a held
	// copy): held itself when it gets no reply, its Done called once sent
	// and answered, or given up.
	Cleanup
)

// Call is one script call on one lane.
type Call struct {
	Kind Kind
	src  bool   // sent with its source (EVAL): set by the worker that sends it
	Hash string // the script's SHA-1, for EVALSHA
	Src  string // the script, for EVAL when the node lacks it
	Keys []string
	Args []any
	// Cmd, when set, is the call's EVALSHA as sent: "evalsha", Hash,
	// len(Keys), Keys..., Args..., made once for the calls of an attempt,
	// which share it (no one writes it). nil: the lane makes it.
	Cmd     []any
	Timeout time.Duration // how long the node may stay silent (at least the lane's node timeout)
	Ack     *Ack          // the replicas its write must reach (Write only), or nil
	H       Handler
	// Many, when set, is the script that runs several calls of this one's
	// script at once: calls of a batch with the same Many whose keys no
	// other call of the batch has go as one call of it (see manyCalls).
	Many *Many

	// merge, set by the worker that sends it, lets it go in a Many call;
	// merged says that it went in one (its res is its part of the answer).
	merge, merged bool
	res           Result // written by the worker that sends it
	// cmd is the call's command in its batch, and one the batch's commands
	// when it goes alone (see runBatch): the worker that sends it owns them.
	cmd driver.Cmd
	one [1]*driver.Cmd
}

// Many is a script that runs several calls of another script at once, as
// one after the other: its KEYS are theirs, call after call; its ARGV, per
// call, the number of the call's keys, then the call's Args. It answers
// one reply per call: the other script's answer, or (a string) the error
// the other script would have raised. The calls of one Many call have no
// key in common, and on a Cluster one hash slot.
type Many struct {
	Hash, Src string
	// Alone starts a reply for a call that the Many call could not run
	// and that wrote nothing: the error follows, and the call goes again
	// alone.
	Alone string
}

// The most calls, and keys, that one Many call takes: a Lua script takes
// at most 8000 values on its stack (unpack of the KEYS), and a long script
// holds the node up.
const (
	maxManyCalls = 256
	maxManyKeys  = 1024
)

// Handler is told what becomes of a call.
//
// The lane does not touch a Write again once its Sendable said no, nor a
// call once its Done has returned unless the Result was Late: a Handler
// may then reuse what the call is part of.
type Handler interface {
	// Sendable is asked as the worker is about to send the call; a Write
	// that is not worth sending any more is dropped (its Handler hears
	// nothing more). Releases are sent whatever it says.
	Sendable() bool
	// Done takes the call's Result: the answer, or why it was not sent.
	// It is called once per call, from a worker or from Submit.
	Done(Result)
	// Silent is told that the call's batch had no answer within its
	// timeout; r.Err is a *TimeoutError. Done follows when the client
	// returns (a call held for later excepted), with Result.Late set.
	Silent(r Result)
	// Held returns the copy of a Release to hold and send again when the
	// call got no reply: a Cleanup.
	Held() *Call
}

// Doubter is a Handler that wants to know when its Cleanup got no reply
// and is held to be sent again: the copy already sent may still reach the
// node at any time, after the one sent again was answered.
type Doubter interface {
	Unanswered()
}

// Connector is a Handler that wants to know when its call waits for a
// connection to its node to be set up (see Lane.setUp): from Connecting
// until Sendable is asked, the node's silence is not the node's answer
// being late. Connecting may come after Sendable was asked (a call queued
// as the set-up ended): the Handler then ignores it.
type Connector interface {
	Connecting()
}

// connecting tells c's Handler that c waits for a connection's set-up.
func connecting(c *Call) {
	if cn, ok := c.H.(Connector); ok {
		cn.Connecting()
	}
}

// Result is what became of a call.
type Result struct {
	// Reply is the script's answer, when Err is nil.
	Reply any
	// Err is an error reply (a redis.Error), a network error, a
	// *TimeoutError, or a *TwinError.
	Err error
	// First is, for a call sent twice (see resends), what its first run
	// answered: its Reply and Err are the second run's.
	First *Result
	// Acks is, for a call with an Ack whose script answered, how many
	// replicas took the batch's writes (-1: not known), Local whether the
	// primary's own append-only file did (WAITAOF; -1: not known), and
	// AckErr why the count is not known (WAIT failed, or answered
	// something else).
	Acks, Local int
	AckErr      error
	// Late says that the call went in a round that went silent: its
	// Handler's Silent ran, or may be running, in the watchdog's
	// goroutine as Done runs.
	Late bool
	// manyErr: the call went in a Many call that did not run it, and it
	// goes again alone (see resends); manyFailed: that Many call failed
	// as a whole (Err is its error), before its script ran.
	manyErr, manyFailed bool
}

// TimeoutError says that the node did not answer in time, or that its
// circuit was open and the call was not sent.
type TimeoutError struct {
	Timeout     time.Duration // the silence that passed
	CircuitOpen bool          // not sent: the lane's breaker was open
	Shard       string        // a Cluster shard primary's address, or ""
	Cause       error         // the client's last network error on the lane, if any
	// RoundTrip is how long the lane's last answered round took, when
	// that is above Timeout: the node is farther away than the timeout
	// allows (0 otherwise).
	RoundTrip time.Duration
	// Paused is how long this process was paused while the round was out
	// (pause.Wait).
	Paused time.Duration
}

func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("no answer within %v", e.Timeout)
	if e.CircuitOpen {
		s = fmt.Sprintf("not sent: no answer within %v lately (circuit open)", e.Timeout)
	}
	if e.Shard != "" {
		s += " from shard " + e.Shard
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	if e.RoundTrip > e.Timeout {
		s += fmt.Sprintf("; its last answer took %v, a round trip above the timeout", e.RoundTrip)
	}
	return s
}

// Unwrap returns the cause.
func (e *TimeoutError) Unwrap() error { return e.Cause }

// TwinError is the Result of a Write on a node whose server an earlier node
// of the same Servers claimed: not sent, or, when learnt in its own batch,
// its answer set aside.
type TwinError struct {
	Node, First int    // the node's index, and the claimant's
	FirstAddr   string // the claimant's address
	ID          string // the server's run_id
}

func (e *TwinError) Error() string {
	return fmt.Sprintf("the same server as node %d (%s, run_id %s)", e.First, e.FirstAddr, e.ID)
}
