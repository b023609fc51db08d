// Package driver says what redlock needs of a Redis client, so that a
// quorum's nodes can be reached through any client: go-redis's (which
// [redlock.New] takes as they are, and [GoRedis] wraps), or another one
// through an adapter module (github.com/go-redlock/redlock/redlockrueidis
// for rueidis, .../redlockvalkey for valkey-go), each of which implements
// [Node] in its client's idioms. [redlock.NewFromNodes] takes Nodes.
//
// A Node sends commands and opens subscriptions; everything else (the
// scripts, the votes, the retries, the bounds on a node that does not
// answer) is the library's. The package drivertest checks a Node on real
// servers: every adapter runs it.
package driver

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Node is one node of a quorum, through a client: one Redis server, a
// Sentinel group's primary, or a Redis Cluster. Its methods are called
// from many goroutines at once.
type Node interface {
	// Do sends cmds to the node in one round trip when it can, in order,
	// and sets each command's Reply, or its Err. The commands of one Do go
	// to the server on one connection, in that order: a WAIT counts the
	// writes before it on its connection. On a Cluster, each command goes
	// to the primary of its Key's slot (every command of one Do that holds
	// a WAIT has its Key in one slot). Do returns when every command has
	// its answer or its error; ctx carries no deadline: the library bounds
	// its wait for a node itself, and Do's goroutine is left to the
	// client's own timeouts.
	Do(ctx context.Context, cmds []*Cmd)
	// Subscribe subscribes to channel: with SSUBSCRIBE when sharded (on a
	// Cluster, at the primary of the channel's slot), else SUBSCRIBE. It
	// returns at once; the subscription's errors come from its Receive.
	Subscribe(ctx context.Context, channel string, sharded bool) Subscription
	// Info says what the node is.
	Info() Info
}

// Info says what a Node is.
type Info struct {
	// Addr names the node for people (in errors and logs): an address,
	// "cluster " and its seeds. Never a password.
	Addr string
	// Cluster: the node is a Redis Cluster, whose commands are routed by
	// their keys' slots (a release then announces on sharded channels).
	Cluster bool
	// OneServer: the node is one server whose identity does not change (not
	// a Sentinel group, not a Cluster). Such a node is asked its server's
	// run_id (INFO server) beside its first calls, so that one server
	// reached by two names votes once.
	OneServer bool
	// Servers are the addresses (host:port) the client knows the node's
	// servers by: the server's, a Cluster's seeds or nodes; none for a
	// Sentinel group. Two nodes that share one are refused: they would
	// vote twice.
	Servers []string
}

// Cmd is one command of a Do: its arguments (strings and integers), and
// what the node answered.
type Cmd struct {
	// Args are read only: the commands of several nodes may share them
	// (a quorum's nodes are sent the same script call at once).
	Args []any
	// Key routes the command on a Cluster: its first key, or, for a
	// command with none (WAIT), the key of the commands it follows.
	Key string
	// Reply is the node's answer: nil, int64, string or []any (of those).
	Reply any
	// Err is an error reply (an [Error]: its text as the server sent it,
	// such as "NOSCRIPT No matching script."), [Nil] for a nil reply, or
	// the client's own error (a network error, a timeout, [ErrClosed]).
	Err error
}

// Error is a server's error reply. A client's error type that has a
// RedisError method (go-redis's do) is one; [ReplyError] is one for the
// others.
type Error interface {
	error
	RedisError()
}

// ReplyError is an error reply, as the server sent it.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// RedisError marks e as an error reply (see [Error]).
func (ReplyError) RedisError() {}

// Nil is a nil reply's Err (go-redis's redis.Nil).
var Nil = redis.Nil

// ErrClosed is the Err of a command sent through a client that was closed
// (go-redis's redis.ErrClosed).
var ErrClosed = redis.ErrClosed

// Subscription is a subscription to one channel.
type Subscription interface {
	// Receive waits for the next event: a message, or a confirmation of
	// the subscription (the first, and one after each reconnection, when
	// messages may have been missed), or the node ending it (a Cluster's
	// slot moved). It returns an error when ctx ends, when the
	// subscription was closed, or when the node refused the subscription
	// (an [Error], such as SSUBSCRIBE unknown before Redis 7). It
	// reconnects by itself after a network error.
	Receive(ctx context.Context) (Event, error)
	// Close ends the subscription, and a Receive waiting on it.
	Close() error
}

// EventKind is what a subscription's event is.
type EventKind uint8

// The kinds of events.
const (
	Message      EventKind = iota // a message on the channel: Payload
	Subscribed                    // the subscription was confirmed (again, after a reconnection)
	Unsubscribed                  // the node ended the subscription
)

// Event is what a subscription received.
type Event struct {
	Kind    EventKind
	Payload string
}

// IsError reports whether err is a server's error reply.
func IsError(err error) bool {
	var e Error
	return errors.As(err, &e)
}
