package redlock

import "time"

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

// fenceRound is what became of a fenced attempt's write-back.
type fenceRound uint8

const (
	fenceNone    fenceRound = iota // not fenced, or the first round failed
	fenceSent                      // sent: the votes are the write-back's
	fenceTooLate                   // not sent: no validity was left after the first round
)

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
