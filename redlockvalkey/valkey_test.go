package redlockvalkey_test

import (
	"testing"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/driver/drivertest"
	"github.com/go-redlock/redlock/redlockvalkey"
)

// valkey-go's nodes pass the checks go-redis's do.
func TestValkey(t *testing.T) {
	drivertest.Run(t, drivertest.Driver{
		Node: func(tb testing.TB, addr string) driver.Node {
			return redlockvalkey.Node(client(tb, valkey.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true}))
		},
		Cluster: func(tb testing.TB, addrs []string) driver.Node {
			return redlockvalkey.Node(client(tb, valkey.ClientOption{InitAddress: addrs}))
		},
	})
}

func client(tb testing.TB, o valkey.ClientOption) valkey.Client {
	tb.Helper()
	c, err := valkey.NewClient(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}
