// Package redlockrueidis lets redlock reach its nodes through rueidis
// (github.com/redis/rueidis): Dial makes a node of one server (or of a
// Sentinel group) that connects in the background, so that a service starts
// while a node is down; Node makes a rueidis.Client into a node of a
// quorum. Either goes to redlock.NewFromNodes.
//
//	nodes := make([]driver.Node, len(addrs))
//	for i, addr := range addrs {
//		n, err := redlockrueidis.Dial(rueidis.ClientOption{InitAddress: []string{addr}})
//		if err != nil { ... } // an option refused; a node down is no error
//		defer n.Close()       // after the Redlock's Close
//		nodes[i] = n
//	}
//	rl, err := redlock.NewFromNodes(nodes)
//
// A client of one server, of a Sentinel group (ClientOption.Sentinel) or of
// a Redis Cluster is one node each. A node's calls go out on rueidis's
// pipelined connection, with every other command of the client: a round of
// several calls is one DoMulti.
package redlockrueidis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/go-redlock/redlock/driver"
)

// Node returns the node of a rueidis client, or nil for a nil client
// (which redlock.NewFromNodes refuses). Its Info names the servers the
// client knows when Node is called (rueidis dials at once).
func Node(c rueidis.Client) driver.Node {
	if c == nil {
		return nil
	}
	n := &node{c: c}
	var addrs []string
	for a := range c.Nodes() {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	switch c.Mode() {
	case rueidis.ClientModeCluster:
		n.info = driver.Info{Addr: "cluster " + strings.Join(addrs, ","), Cluster: true, Servers: addrs}
	case rueidis.ClientModeSentinel:
		n.info = driver.Info{Addr: "sentinel failover group"}
	default:
		n.info = driver.Info{Addr: strings.Join(addrs, ","), OneServer: true, Servers: addrs}
	}
	return n
}

// Dial returns a node that makes its client with rueidis.NewClient(opt) in
// the background: it returns at once, and a service starts while the node
// is down (rueidis.NewClient fails for a server that does not answer). Until
// the client is made, the node votes against: each call fails at once with a
// *DialError naming the address and the last dial's error; the dials go on,
// 100ms apart and then twice as far each time, 5s at most, until one
// succeeds or Close. The client made reconnects by itself.
//
// opt names one server (InitAddress holds one address; Dial sets
// ForceSingleClient, since without a connection a server cannot be told
// from a Cluster) or a Sentinel group (Sentinel.MasterSet). For a Cluster,
// use Node with a client of its own: a Cluster is down only when every seed
// is. Dial returns an error for any other opt.
//
// Close the node after the Redlock's Close: the Redlock does not close it.
func Dial(opt rueidis.ClientOption) (*DialedNode, error) {
	d := &DialedNode{err: errFirstDial, done: make(chan struct{})}
	switch {
	case opt.Sentinel.MasterSet != "":
		if len(opt.InitAddress) == 0 {
			return nil, errors.New("redlockrueidis: Dial of a Sentinel group: no InitAddress: give the Sentinels' addresses")
		}
		d.info = driver.Info{Addr: "sentinel failover group"}
	case len(opt.InitAddress) == 1:
		opt.ForceSingleClient = true
		a := opt.InitAddress[0]
		d.info = driver.Info{Addr: a, OneServer: true, Servers: []string{a}}
	default:
		return nil, fmt.Errorf("redlockrueidis: Dial takes one server's address, got InitAddress %q: "+
			"for a Cluster, make its client with rueidis.NewClient and give it to Node", opt.InitAddress)
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if opt.DialFn == nil { // (the deprecated DialFn's dials cannot be cut short)
		opt.DialCtxFn = d.dialer(opt.DialCtxFn)
	}
	go d.dial(opt)
	return d, nil
}

// DialedNode is a node made by Dial. It is safe for concurrent use.
type DialedNode struct {
	info   driver.Info
	ctx    context.Context // ends at Close: a dial under way is cut short
	cancel context.CancelFunc
	done   chan struct{} // closed when dial has returned

	mu     sync.Mutex
	n      *node // set once the client is made
	err    error // the last dial's error, until then
	closed bool
	cuts   []func() bool // the connections of the NewClient under way, closed at Close
}

// DialError is the error of every call of a DialedNode whose client is not
// made yet.
type DialError struct {
	Addr string
	Err  error // the last dial's error
}

func (e *DialError) Error() string {
	return "redlockrueidis: no connection to " + e.Addr + " yet: " + e.Err.Error() + " (dialing in the background)"
}

// Unwrap returns the dial's error. A refused dial (a *net.OpError) is a
// node down to the library: no release is held for it.
func (e *DialError) Unwrap() error { return e.Err }

var errFirstDial = errors.New("the first dial is under way")

// Backoff of the dials: the first again after dialFirst, doubling up to
// dialMax.
const (
	dialFirst = 100 * time.Millisecond
	dialMax   = 5 * time.Second
)

// dial makes the client, again after each failure, until it is made or
// the node closed.
func (d *DialedNode) dial(opt rueidis.ClientOption) {
	defer close(d.done)
	wait := dialFirst
	for {
		c, err := rueidis.NewClient(opt)
		d.mu.Lock()
		for _, stop := range d.cuts { // its connections are the client's now
			stop()
		}
		d.cuts = nil
		if err == nil {
			d.n = &node{c: c, info: d.info}
			d.mu.Unlock()
			return // Close closes it
		}
		d.err = err
		d.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-d.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, dialMax)
	}
}

// dialer returns a DialCtxFn that dials as inner does (or as
// rueidis's default does, for nil), and gives up at Close. A connection
// made while the client is not (NewClient's handshake on it, which a
// server that hangs never answers) is closed at Close too, so that Close
// does not wait for the handshake's timeout.
func (d *DialedNode) dialer(inner func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error)) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, nd *net.Dialer, tc *tls.Config) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(d.ctx, cancel)()
		var c net.Conn
		var err error
		switch {
		case inner != nil:
			c, err = inner(ctx, dst, nd, tc)
		case tc != nil:
			c, err = (&tls.Dialer{NetDialer: nd, Config: tc}).DialContext(ctx, "tcp", dst)
		default:
			c, err = nd.DialContext(ctx, "tcp", dst)
		}
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		if d.n == nil { // a reconnection of the client made: Close closes the client
			d.cuts = append(d.cuts, context.AfterFunc(d.ctx, func() { _ = c.Close() }))
		}
		d.mu.Unlock()
		return c, nil
	}
}

// node returns the node of the client, or the error of a call without it.
func (d *DialedNode) node() (*node, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return nil, driver.ErrClosed
	case d.n == nil:
		return nil, &DialError{Addr: d.info.Addr, Err: d.err}
	}
	return d.n, nil
}

// Info says what the node is, from Dial's opt: known without a connection.
func (d *DialedNode) Info() driver.Info { return d.info }

// Do sends cmds through the client (see Node), or fails each at once while
// there is none.
func (d *DialedNode) Do(ctx context.Context, cmds []*driver.Cmd) {
	n, err := d.node()
	if err != nil {
		for _, c := range cmds {
			c.Err = err
		}
		return
	}
	n.Do(ctx, cmds)
}

// Subscribe subscribes through the client (see Node). Without one, the
// subscription's Receive fails at once; the library subscribes again a
// moment later.
func (d *DialedNode) Subscribe(ctx context.Context, channel string, sharded bool) driver.Subscription {
	n, err := d.node()
	if err != nil {
		return failed{err}
	}
	return n.Subscribe(ctx, channel, sharded)
}

// failed is a subscription that could not be made.
type failed struct{ err error }

func (f failed) Receive(context.Context) (driver.Event, error) { return driver.Event{}, f.err }
func (f failed) Close() error                                  { return nil }

// Close stops the dials, waiting for the one under way, and closes the
// client if it was made. A call after Close fails with driver.ErrClosed.
// Close is idempotent.
func (d *DialedNode) Close() {
	d.cancel()
	<-d.done
	d.mu.Lock()
	n := d.n
	d.closed, d.n = true, nil
	d.mu.Unlock()
	if n != nil {
		n.c.Close()
	}
}

type node struct {
	c    rueidis.Client
	info driver.Info
}

func (n *node) Info() driver.Info { return n.info }

// Do sends cmds in one DoMulti: on one connection in order, and on a
// Cluster each at its Key's slot. A batch that ends with a WAIT goes on a
// dedicated connection: on the client's shared pipeline, the WAIT would
// hold up every command behind it (every other lock's calls) for as long
// as it waits for the replicas.
func (n *node) Do(ctx context.Context, cmds []*driver.Cmd) {
	multi := make(rueidis.Commands, len(cmds))
	waits := false
	for i, c := range cmds {
		multi[i] = n.c.B().Arbitrary(strs(c.Args)...).Build()
		if n.info.Cluster && c.Key != "" {
			multi[i] = multi[i].SetSlot(c.Key)
		}
		if name, _ := c.Args[0].(string); strings.EqualFold(name, "wait") || strings.EqualFold(name, "waitaof") {
			waits = true
		}
	}
	var res []rueidis.RedisResult
	switch {
	case waits:
		err := n.c.Dedicated(func(dc rueidis.DedicatedClient) error {
			res = dc.DoMulti(ctx, multi...)
			return nil
		})
		if res == nil {
			for _, c := range cmds {
				c.Err = convErr(err)
			}
			return
		}
	case len(multi) == 1:
		cmds[0].Reply, cmds[0].Err = reply(n.c.Do(ctx, multi[0]))
		return
	default:
		res = n.c.DoMulti(ctx, multi...)
	}
	for i, r := range res {
		cmds[i].Reply, cmds[i].Err = reply(r)
	}
}

// strs returns args as the strings rueidis sends.
func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = v
		case int:
			out[i] = strconv.Itoa(v)
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

// reply reads r as driver.Cmd says: nil, int64, string, []any; an error
// reply as a driver.ReplyError.
func reply(r rueidis.RedisResult) (any, error) {
	m, err := r.ToMessage()
	if err != nil {
		return nil, convErr(err)
	}
	v, err := m.ToAny()
	if err != nil {
		return nil, convErr(err)
	}
	return conv(v), nil
}

// conv makes the errors inside an array reply driver.ReplyErrors.
func conv(v any) any {
	switch t := v.(type) {
	case []any:
		for i := range t {
			t[i] = conv(t[i])
		}
	case error:
		return convErr(t)
	}
	return v
}

// convErr maps rueidis's errors to the driver's: an error reply (as the
// server sent it: rueidis drops the "ERR " of "ERR unknown command ...",
// which the library reads, so it is put back before a message that starts
// with no error code), a nil reply, a closed client.
func convErr(err error) error {
	if err == nil {
		return nil
	}
	if rueidis.IsRedisNil(err) {
		return driver.Nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		if !hasCode(msg) {
			msg = "ERR " + msg
		}
		return driver.ReplyError(msg)
	}
	if errors.Is(err, rueidis.ErrClosing) {
		return errors.Join(driver.ErrClosed, err)
	}
	return err
}

// Subscribe subscribes with rueidis's Receive, in a goroutine that calls it
// again after a network error (rueidis's Receive returns then).
func (n *node) Subscribe(ctx context.Context, channel string, sharded bool) driver.Subscription {
	ctx, cancel := context.WithCancel(ctx)
	s := &sub{events: make(chan driver.Event, 64), cancel: cancel, done: make(chan struct{})}
	go s.run(ctx, n.c, channel, sharded)
	return s
}

type sub struct {
	events chan driver.Event
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error // what ended it
}

// resubscribeAfter is how long a subscription whose connection failed
// waits before it subscribes again.
const resubscribeAfter = 100 * time.Millisecond

func (s *sub) run(ctx context.Context, c rueidis.Client, channel string, sharded bool) {
	defer close(s.done)
	send := func(ev driver.Event) {
		select {
		case s.events <- ev:
		case <-ctx.Done():
		}
	}
	hooked := rueidis.WithOnSubscriptionHook(ctx, func(ps rueidis.PubSubSubscription) {
		if strings.HasSuffix(ps.Kind, "unsubscribe") {
			send(driver.Event{Kind: driver.Unsubscribed})
		} else {
			send(driver.Event{Kind: driver.Subscribed})
		}
	})
	for ctx.Err() == nil {
		cmd := c.B().Subscribe().Channel(channel).Build()
		if sharded {
			cmd = c.B().Ssubscribe().Channel(channel).Build()
		}
		err := c.Receive(hooked, cmd, func(m rueidis.PubSubMessage) {
			send(driver.Event{Kind: driver.Message, Payload: m.Message})
		})
		if ctx.Err() != nil {
			break
		}
		if err != nil && isReply(err) {
			s.end(convErr(err)) // refused: asking again cannot help
			return
		}
		// A network error, the node ended it, or no connection (rueidis's
		// ErrClosing: the client closed, or a failover or a Cluster's new
		// topology closed the connection): again after a pause, until
		// Close.
		select {
		case <-ctx.Done():
		case <-time.After(resubscribeAfter):
		}
	}
	s.end(ctx.Err())
}

// hasCode reports whether an error reply starts with an error code: a word
// of capitals (WRONGTYPE, NOSCRIPT, MOVED), not the text that follows ERR.
func hasCode(msg string) bool {
	word, _, _ := strings.Cut(msg, " ")
	if len(word) < 2 {
		return false
	}
	for _, r := range word {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

func isReply(err error) bool { _, ok := rueidis.IsRedisErr(err); return ok }

func (s *sub) end(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// Receive returns the next event, or what ended the subscription.
func (s *sub) Receive(ctx context.Context) (driver.Event, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	case <-ctx.Done():
		return driver.Event{}, ctx.Err()
	case <-s.done:
		select {
		case ev := <-s.events:
			return ev, nil
		default:
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err == nil {
			return driver.Event{}, context.Canceled
		}
		return driver.Event{}, s.err
	}
}

// Close ends the subscription, and waits for its goroutine.
func (s *sub) Close() error {
	s.cancel()
	<-s.done
	return nil
}
