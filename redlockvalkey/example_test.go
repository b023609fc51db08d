package redlockvalkey_test

import (
	"context"
	"log"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/redlockvalkey"
)

// A Redlock over three servers, each through a valkey-go client of its own.
func ExampleNode() {
	var nodes []driver.Node
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			log.Fatal(err) // valkey-go dials at once: a node down is an error here
		}
		defer c.Close()
		nodes = append(nodes, redlockvalkey.Node(c))
	}
	rl, err := redlock.NewFromNodes(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	err = rl.Using(context.Background(), []string{"invoice:42"}, 10*time.Second, func(ctx context.Context) error {
		return nil // the work, under the lock
	})
	if err != nil {
		log.Print(err)
	}
}
