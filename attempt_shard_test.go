package redlock

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/redistest"
	"github.com/go-redlock/redlock/internal/script"
	"github.com/go-redlock/redlock/internal/slot"
)

// slot.Of agrees with the Cluster's own CLUSTER KEYSLOT, hash tags and their
// corner cases included, and a resource's sharded channel is in the
// resource's slot.
func TestSlotsMatchTheCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	c := nodes[0].Client()
	ctx := context.Background()
	keys := []string{"a", "foo", "{orders}:1", "x{orders}y", "{", "}", "{}", "{}x}", "a}b", "a{b",
		"{a}{b}", "x{}{y}", "{{a}}", "ümlaut", "redlock:released", "\x00\xff"}
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab{}:"
	for range 300 {
		b := make([]byte, 1+rnd.IntN(8))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		keys = append(keys, string(b))
	}
	tagged := 0
	for _, k := range keys {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, int64(slot.Of(k)), "slot of %q", k)
		ch := shardedChannel(k)
		if ch == ReleasedChannel+":{"+slot.HashTag(k)+"}" {
			tagged++
		}
		got, err := c.ClusterKeySlot(ctx, ch).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, "slot of %q's channel %q", k, ch)
	}
	t.Logf("%d keys, %d with a channel named after their hash tag, the others on their slot's channel", len(keys), tagged)

	// Each resource's fencing counter is in the resource's slot, and no two
	// resources share one.
	counters := map[string]string{}
	odd := 0
	for _, k := range keys {
		want, _ := c.ClusterKeySlot(ctx, k).Result()
		fk := fenceKey(k)
		got, err := c.ClusterKeySlot(ctx, fk).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, "slot of %q's counter %q", k, fk)
		if other, ok := counters[fk]; ok && other != k {
			t.Errorf("%q and %q share the counter %q", other, k, fk)
		}
		counters[fk] = k
		if fk != script.FencePrefix+"{"+slot.HashTag(k)+"}:"+k {
			odd++
		}
	}
	t.Logf("%d counters, %d of them for resources with a '}' and no hash tag", len(counters), odd)
	assert.Equal(t, "redlock:fence:{orders}:{orders}:1", fenceKey("{orders}:1"))
	assert.Equal(t, "redlock:fence:{a}:a", fenceKey("a"))
}
