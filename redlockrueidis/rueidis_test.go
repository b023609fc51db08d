package redlockrueidis_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/driver/drivertest"
	"github.com/go-redlock/redlock/redlockrueidis"
)

// rueidis's nodes pass the checks go-redis's do.
func TestRueidis(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Node: func(tb testing.TB, addr string) driver.Node {
			return redlockrueidis.Node(client(tb, rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true}))
		},
		Cluster: func(tb testing.TB, addrs []string) driver.Node {
			return redlockrueidis.Node(client(tb, rueidis.ClientOption{InitAddress: addrs}))
		},
	})
}

func client(tb testing.TB, o rueidis.ClientOption) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}
