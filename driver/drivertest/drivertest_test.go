package drivertest_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/driver/drivertest"
)

// go-redis's nodes pass the checks every adapter runs.
func TestGoRedis(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Node: func(tb testing.TB, addr string) driver.Node {
			c := redis.NewClient(&redis.Options{Addr: addr})
			tb.Cleanup(func() { _ = c.Close() })
			return driver.GoRedis(c)
		},
		Cluster: func(tb testing.TB, addrs []string) driver.Node {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			tb.Cleanup(func() { _ = c.Close() })
			return driver.GoRedis(c)
		},
	})
}
