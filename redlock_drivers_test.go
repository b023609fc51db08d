package redlock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/driver"
)

// listNode is a Node of a user's whose type cannot be compared with ==
// (a slice field): NewFromNodes must not panic comparing two of them.
type listNode struct {
	addrs []string
}

func (n listNode) Do(context.Context, []*driver.Cmd) {}
func (n listNode) Subscribe(context.Context, string, bool) driver.Subscription {
	return nil
}
func (n listNode) Info() driver.Info { return driver.Info{Addr: n.addrs[0], Servers: n.addrs} }

// NewFromNodes refuses what New refuses, naming nodes[i], with an error
// (no panic): a nil node, a typed nil client, one node twice, one server
// or one Cluster twice. It takes 2 nodes, as New does.
func TestNewFromNodesRefuses(t *testing.T) {
	t.Parallel()
	c := func(addr string) *redis.Client {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	a, b := driver.GoRedis(c("10.0.0.1:6379")), driver.GoRedis(c("10.0.0.2:6379"))
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.9:7000", "10.0.0.8:7000"}})
	t.Cleanup(func() { _ = cc.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"x": "10.0.0.5:6379"}})
	t.Cleanup(func() { _ = ring.Close() })
	cases := []struct {
		name  string
		nodes []driver.Node
		want  string
	}{
		{"none", nil, "no nodes"},
		{"nil", []driver.Node{a, nil, b}, "nodes[1] is nil"},
		{"typed nil client", []driver.Node{a, driver.GoRedis((*redis.Client)(nil)), b}, "nodes[1] is nil"},
		{"twice", []driver.Node{a, b, a}, "nodes[2] is the same node as nodes[0]"},
		{"one server, two clients", []driver.Node{a, b, driver.GoRedis(c("10.0.0.1:6379"))}, "nodes[0] and nodes[2] talk to the same server (10.0.0.1:6379)"},
		{"one Cluster, two clients", []driver.Node{a, driver.GoRedis(cc), listNode{[]string{"10.0.0.7:7000", "10.0.0.8:7000"}}}, "nodes[1] and nodes[2] talk to the same server (10.0.0.8:7000)"},
		{"ring", []driver.Node{a, b, driver.GoRedis(ring)}, "nodes[2] is a *redis.Ring"},
	}
	for _, tc := range cases {
		_, err := redlock.NewFromNodes(tc.nodes)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
	rl, err := redlock.NewFromNodes([]driver.Node{a, b})
	require.NoError(t, err, "NewFromNodes(2 nodes)")
	assert.Equal(t, 2, rl.Nodes())
	require.NoError(t, rl.Close())
	// Two of a type that cannot be compared: distinct, no panic.
	rl, err = redlock.NewFromNodes([]driver.Node{listNode{[]string{"10.0.1.1:1"}}, listNode{[]string{"10.0.1.2:1"}}, a})
	require.NoError(t, err)
	require.NoError(t, rl.Close())
}
