package slot

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/redistest"
)

// keys returns names with hash tags and their corner cases, and 300 random
// ones over an alphabet of braces.
func keys() []string {
	ks := []string{"a", "foo", "{orders}:1", "x{orders}y", "{", "}", "{}", "{}x}", "a}b", "a{b",
		"{a}{b}", "x{}{y}", "{{a}}", "ümlaut", "redlock:released", "\x00\xff"}
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := "ab{}:"
	for range 300 {
		b := make([]byte, 1+rnd.IntN(8))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		ks = append(ks, string(b))
	}
	return ks
}

// Of agrees with the Cluster's own CLUSTER KEYSLOT, hash tags and their
// corner cases included; a key's Channel and a name built on its Tag are in
// the key's slot.
func TestSlotsMatchTheCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	c := nodes[0].Client()
	ctx := context.Background()
	named := 0
	for _, k := range keys() {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, int64(Of(k)), "slot of %q", k)
		ch := Channel("p:", k)
		if ch == "p:{"+HashTag(k)+"}" {
			named++
		}
		got, err := c.ClusterKeySlot(ctx, ch).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, "slot of %q's channel %q", k, ch)
		got, err = c.ClusterKeySlot(ctx, "q:{"+Tag(k)+"}:"+k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, "slot of a name on %q's tag %q", k, Tag(k))
	}
	t.Logf("%d keys, %d with a channel named after their hash tag", len(keys()), named)
}

// CRC-16/XMODEM's check value, and the examples of the Cluster spec.
func TestCRC16(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16("123456789"))
	assert.Equal(t, Of("{user1000}.following"), Of("{user1000}.followers"))
	assert.Equal(t, Of("foo{}{bar}"), Of("foo{}{bar}x"[:10]))
	assert.Equal(t, "{bar", HashTag("foo{{bar}}zap"))
}

// NumberTag lands in its slot, and is the smallest number that does (every
// 61st slot: each search starts from 0).
func TestNumberTagEverySlot(t *testing.T) {
	first := make(map[uint16]string, Count)
	for n := 0; len(first) < Count; n++ {
		tag := strconv.Itoa(n)
		if _, ok := first[Of(tag)]; !ok {
			first[Of(tag)] = tag
		}
	}
	for s := uint16(0); s < Count; s += 61 {
		require.Equal(t, first[s], NumberTag(s), "slot %d", s)
	}
}
