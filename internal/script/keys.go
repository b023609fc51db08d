package script

import (
	"strconv"
	"strings"

	"github.com/go-redlock/redlock/internal/slot"
)

// Every key and channel name redlock uses on the nodes, and the namespaces
// that no lock may take as its resource.

// ReleasedChannel is the pub/sub channel on which the release script
// announces each resource it freed, as value + resource (redlock's
// exported ReleasedChannel).
const ReleasedChannel = "redlock:released"

// FencePrefix starts the name of every fencing counter: the fenced scripts'
// KEYS hold, after the resources, their counters under it.
const FencePrefix = "redlock:fence:"

// ElectedChannel is the pub/sub channel on which a term's extension
// announces the term where it recorded it on a node: the message is the
// election's key. Observers of the election wake on it and read the leader.
const ElectedChannel = "redlock:elected"

// LeaderPrefix starts the key under which a node keeps an election's
// leader record (value:term:id), next to the election's lock key.
const LeaderPrefix = "redlock:leader:"

// The markers a semaphore or a shared lock keeps in its resource's own key
// while it is held, so that an exclusive lock (whose acquire sees a value
// that is not its own) waits for it, and a lock of another kind is told
// apart. SharedWriterWaits is SharedMarker once an exclusive acquire found
// it: no new shared lock is granted there until the readers have left, or
// the writer stopped trying for WriterWaitsFor.
const (
	PermitsMarker     = "redlock:permits:" // + the number of permits
	SharedMarker      = "redlock:shared"
	SharedWriterWaits = "redlock:shared:w:" // + until when, in ms of the node's clock
	MixedKinds        = "ERR redlock: mixed kinds: "
)

// QueuePrefix and QueueLivePrefix start the names of a resource's queue
// and of its deadlines.
const (
	QueuePrefix     = "redlock:queue:"
	QueueLivePrefix = "redlock:qlive:"
)

// Tombstone is what a force-released exclusive lock (or permit) leaves in
// its key, for as long as its holder could still try to extend it: every
// acquire of redlock takes it as free, and the holder's extensions, which
// find a value that is not theirs, fail, instead of writing the key again
// (an extension restores a key that a node lost in a restart). A
// force-released reader of a shared lock is kept in the readers' set with a
// negative score (minus when the tombstone ends), which the shared scripts
// do not count as a reader and which makes its extension fail.
const Tombstone = "redlock:gone"

// MarkPrefix starts every value this library writes that is not a lock's
// own (Tombstone, SharedMarker, SharedWriterWaits).
const MarkPrefix = "redlock:"

// PermitPrefix, ReadersPrefix and ElectionPrefix start the keys of a
// semaphore's permits, of a shared lock's readers and of an election's lock.
const (
	PermitPrefix   = "redlock:permit:"
	ReadersPrefix  = "redlock:readers:"
	ElectionPrefix = "redlock:election:"
)

// Key returns the key under prefix that belongs to resource: prefix + "{" +
// tag + "}:" + resource, where tag is resource's hash tag (slot.Tag), so
// that on a Redis Cluster it is in the resource's slot and one script can
// take both. No two resources share one: the resource is the tail, after
// the first "}:".
func Key(prefix, resource string) string {
	return prefix + "{" + slot.Tag(resource) + "}:" + resource
}

// PermitKey returns the key of resource's permit i (1-based).
func PermitKey(resource string, i int) string {
	return Key(PermitPrefix, resource) + ":" + strconv.Itoa(i)
}

// Reserved returns the namespace of redlock's own keys that res is in
// (one no lock may take: a lock there could be taken for one of them), or
// "". The fencing counters' namespace is refused apart (FencePrefix).
func Reserved(res string) string {
	for _, ns := range []string{ElectionPrefix, LeaderPrefix, PermitPrefix, ReadersPrefix, QueuePrefix, QueueLivePrefix} {
		if strings.HasPrefix(res, ns) {
			return ns
		}
	}
	return ""
}
