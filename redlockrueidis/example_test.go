package redlockrueidis_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/rueidis"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/redlockrueidis"
)

// A Redlock over three servers, each through a rueidis client of its own,
// made in the background: the service starts while a server is down, and
// locks on the other two.
func ExampleDial() {
	var nodes []driver.Node
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		n, err := redlockrueidis.Dial(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			log.Fatal(err) // an option Dial refuses; a server down is no error
		}
		defer n.Close() // runs after rl.Close: the Redlock does not close its nodes
		nodes = append(nodes, n)
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

// A Redlock over a client you made (a Cluster's, say). rueidis dials at
// once: rueidis.NewClient fails while its server is down (use Dial for a
// server that may be).
func ExampleNode() {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"redis-a:7000", "redis-b:7000", "redis-c:7000"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	rl, err := redlock.NewFromNodes([]driver.Node{redlockrueidis.Node(c)})
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
}
