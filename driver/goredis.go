package driver

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
)

// GoRedis returns the Node of a go-redis client: a *redis.Client, a
// FailoverClient (Sentinel) or a *redis.ClusterClient. [redlock.New] makes
// its clients into these; GoRedis lets a quorum mix go-redis nodes with
// other clients' in [redlock.NewFromNodes]. It returns nil for a nil
// client.
func GoRedis(c redis.UniversalClient) Node {
	if c == nil {
		return nil
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil // a typed nil: (*redis.Client)(nil)
	}
	g := &goRedis{c: c}
	g.cluster, _ = c.(*redis.ClusterClient)
	g.info = Info{Addr: goRedisAddr(c), Cluster: g.cluster != nil}
	switch c := c.(type) {
	case *redis.Client:
		if o := c.Options(); o.Addr != "FailoverClient" { // a FailoverClient's server changes at each failover
			g.info.OneServer, g.info.Servers = true, []string{o.Addr}
		}
	case *redis.ClusterClient:
		g.info.Servers = c.Options().Addrs
	}
	return g
}

// GoRedisClient returns the go-redis client of a Node that [GoRedis] made.
func GoRedisClient(n Node) (redis.UniversalClient, bool) {
	g, ok := n.(*goRedis)
	if !ok {
		return nil, false
	}
	return g.c, true
}

type goRedis struct {
	c       redis.UniversalClient
	cluster *redis.ClusterClient
	info    Info
}

func (g *goRedis) Info() Info { return g.info }

// Do sends one command alone, and more in a pipeline.
func (g *goRedis) Do(ctx context.Context, cmds []*Cmd) {
	if len(cmds) == 1 {
		c := cmds[0]
		c.Reply, c.Err = g.c.Do(ctx, c.Args...).Result()
		return
	}
	rcs := make([]*redis.Cmd, len(cmds))
	_, perr := g.via(ctx, cmds).Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, c := range cmds {
			rcs[i] = pipe.Do(ctx, c.Args...)
		}
		return nil
	})
	for i, c := range cmds {
		c.Reply, c.Err = rcs[i].Result()
		if c.Reply == nil && c.Err == nil && perr != nil {
			// Never answered: the pipeline failed before it (a wrong
			// password refused as the connection was set up), and
			// go-redis gave the error to the pipeline only. A command
			// always answers something.
			c.Err = perr
		}
	}
}

// via returns the client a pipeline goes through: on a Cluster, one with a
// WAIT goes through the shard primary's own client (WAIT must follow the
// scripts on their connection, and go-redis does not route a command
// without keys in a Cluster pipeline).
func (g *goRedis) via(ctx context.Context, cmds []*Cmd) redis.UniversalClient {
	if g.cluster == nil {
		return g.c
	}
	for _, c := range cmds {
		if name, _ := c.Args[0].(string); strings.EqualFold(name, "wait") || strings.EqualFold(name, "waitaof") {
			if m, err := g.cluster.MasterForKey(ctx, c.Key); err == nil {
				return m
			}
			break
		}
	}
	return g.c
}

// Subscribe subscribes through go-redis's PubSub, which reconnects by
// itself.
func (g *goRedis) Subscribe(ctx context.Context, channel string, sharded bool) Subscription {
	if sharded {
		return goRedisSub{g.c.SSubscribe(ctx, channel)}
	}
	return goRedisSub{g.c.Subscribe(ctx, channel)}
}

type goRedisSub struct{ ps *redis.PubSub }

func (s goRedisSub) Receive(ctx context.Context) (Event, error) {
	for {
		msg, err := s.ps.Receive(ctx)
		if err != nil {
			return Event{}, err
		}
		switch m := msg.(type) {
		case *redis.Message:
			return Event{Kind: Message, Payload: m.Payload}, nil
		case *redis.Subscription:
			if m.Count == 0 {
				return Event{Kind: Unsubscribed}, nil
			}
			return Event{Kind: Subscribed}, nil
		}
		// A pong: not an event.
	}
}

func (s goRedisSub) Close() error { return s.ps.Close() }

// goRedisAddr names a go-redis node for people: its address, with the
// database when not 0; a Cluster's seeds; "sentinel failover group".
// Options hold no password in these fields.
func goRedisAddr(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		if o.Addr == "FailoverClient" { // go-redis's name: the master is found through the sentinels
			return "sentinel failover group"
		}
		if o.DB != 0 {
			return fmt.Sprintf("%s/%d", o.Addr, o.DB)
		}
		return o.Addr
	case *redis.ClusterClient:
		return "cluster " + strings.Join(c.Options().Addrs, ",")
	}
	return ""
}
