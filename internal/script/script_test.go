package script

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/internal/redistest"
)

// run runs s as a lane does (EVALSHA, then EVAL when the node lacks it) and
// reads its reply.
func run(t *testing.T, c *redis.Client, s *Script, keys []string, args ...any) (Reply, error) {
	t.Helper()
	ctx := context.Background()
	res, err := c.EvalSha(ctx, s.Hash, keys, args...).Result()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, err = c.Eval(ctx, s.Src, keys, args...).Result()
	}
	if err != nil {
		return Reply{}, err
	}
	resources := len(keys)
	if s == FencedAcquire || s == WriteBack {
		resources /= 2 // the counters follow the resources
	}
	return s.Read(res, resources)
}

// The scripts' semantics on a real node: all or nothing for acquire and
// extend, our own value never blocks us, a release deletes only our value
// and counts what it deleted, and announces it (the cleanup does not).
func TestScripts(t *testing.T) {
	c := redistest.StartNode(t).Client()
	ctx := context.Background()
	keys := []string{"a", "b"}

	r, err := run(t, c, Acquire, keys, "v1", 1000)
	require.NoError(t, err)
	assert.True(t, r.Full())
	assert.InDelta(t, 1000, c.PTTL(ctx, "a").Val().Milliseconds(), 50)
	r, err = run(t, c, Acquire, keys, "v1", 2000)
	require.NoError(t, err)
	assert.True(t, r.Full(), "our own value does not block a retry")
	r, _ = run(t, c, Acquire, keys, "v2", 1000)
	assert.Equal(t, Reply{Applied: 0, Resources: 2, Holder: "v1"}, r, "another value does, and the node says which")
	require.NoError(t, c.Set(ctx, "c", "0123456789abcdef-and-more", 0).Err())
	r, _ = run(t, c, Acquire, []string{"d", "c"}, "v3", 1000)
	assert.False(t, r.Full())
	assert.Equal(t, "0123456789abcdef", r.Holder, "the holder's first HolderLen bytes")
	assert.Zero(t, c.Exists(ctx, "d").Val(), "all or nothing")

	r, _ = run(t, c, Extend, keys, "v1", 5000)
	assert.True(t, r.Full())
	assert.InDelta(t, 5000, c.PTTL(ctx, "b").Val().Milliseconds(), 50)
	r, _ = run(t, c, Extend, keys, "v2", 5000)
	assert.Equal(t, int64(0), r.Applied)

	sub := c.Subscribe(ctx, ReleasedChannel)
	defer sub.Close()
	_, err = sub.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "b", "thief", 0).Err())
	r, _ = run(t, c, Release, keys, "v1")
	assert.Equal(t, Reply{Applied: 1, Resources: 2}, r, "only the key that held the value")
	assert.Equal(t, "thief", c.Get(ctx, "b").Val())
	msg, err := sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "v1a", msg.Payload)

	require.NoError(t, c.Set(ctx, "e", "v4", 0).Err())
	r, _ = run(t, c, Cleanup, []string{"e"}, "v4")
	assert.True(t, r.Full())
}

// A fenced acquire answers {applied, highest counter} and writes nothing
// when a counter is not a token; the write-back raises counters only where
// every resource holds the value.
func TestFencedScripts(t *testing.T) {
	c := redistest.StartNode(t).Client()
	ctx := context.Background()
	keys := []string{"a", "b", "fa", "fb"}
	require.NoError(t, c.Set(ctx, "fb", "7", 0).Err())
	r, err := run(t, c, FencedAcquire, keys, "v", 1000)
	require.NoError(t, err)
	assert.Equal(t, Reply{Applied: 2, Resources: 2, Counter: 7}, r)
	r, err = run(t, c, WriteBack, keys, "v", "8")
	require.NoError(t, err)
	assert.True(t, r.Full())
	assert.Equal(t, "8", c.Get(ctx, "fa").Val())
	r, _ = run(t, c, WriteBack, keys, "other", "9")
	assert.False(t, r.Full())
	assert.Equal(t, "8", c.Get(ctx, "fb").Val())

	require.NoError(t, c.Set(ctx, "fy", "nope", 0).Err())
	_, err = run(t, c, FencedAcquire, []string{"y", "fy"}, "v", 1000)
	assert.ErrorContains(t, err, "redlock: the fencing counter fy holds nope")
	assert.Zero(t, c.Exists(ctx, "y").Val())
	require.NoError(t, c.Set(ctx, "fy", "9007199254740991", 0).Err())
	_, err = run(t, c, FencedAcquire, []string{"y", "fy"}, "v", 1000)
	assert.ErrorContains(t, err, "fencing tokens exhausted")
}

// Read takes only the answers each script gives.
func TestRead(t *testing.T) {
	r, err := FencedAcquire.Read([]any{int64(2), int64(7)}, 2)
	require.NoError(t, err)
	assert.Equal(t, Reply{Applied: 2, Resources: 2, Counter: 7}, r)
	for _, bad := range []any{int64(2), []any{int64(2)}, []any{int64(2), int64(-1)}, []any{int64(2), int64(MaxToken)}, []any{"2", int64(1)}} {
		var ue *UnexpectedError
		_, err := FencedAcquire.Read(bad, 2)
		assert.ErrorAs(t, err, &ue, "%#v", bad)
	}
	r, err = WriteBack.Read(int64(2), 2)
	require.NoError(t, err)
	assert.True(t, r.Full())
	_, err = Release.Read("OK", 1)
	assert.EqualError(t, err, "redlock: unexpected result of type string returned from redis")
	_, err = Acquire.Read("OK", 1)
	assert.ErrorAs(t, err, new(*UnexpectedError))
	r, err = Acquire.Read([]any{int64(0), "0123456789abcdef"}, 1)
	require.NoError(t, err)
	assert.Equal(t, Reply{Resources: 1, Holder: "0123456789abcdef"}, r, "an acquire's refusal names the holder")
	for _, bad := range []any{[]any{int64(0), "0123456789abcdef0"}, []any{int64(1), "a"}, []any{int64(0), int64(1)}} {
		_, err = Acquire.Read(bad, 1)
		assert.ErrorAs(t, err, new(*UnexpectedError), "%#v", bad)
	}
	assert.NotEqual(t, Release.Hash, ReleaseSharded.Hash)
}

// ExtendMany answers, lock by lock, what Extend answers when the locks are
// extended one after the other, and leaves the keys as Extend does (value
// and ttl), whatever each lock's keys hold: its value, another value,
// nothing, a tombstone, or a key of another type.
func TestExtendManyIsExtendOneByOne(t *testing.T) {
	t.Parallel()
	c := redistest.StartNode(t).Client()
	ctx := context.Background()
	type lock struct {
		keys  []string
		value string
		ttl   int64
	}
	// Each key's starting state: "" missing, "#" a hash, else a string value.
	states := []string{"v", "other", "", "#", Tombstone, "v", "", "v"}
	var locks []lock
	n := 0
	for size := 1; size <= 3; size++ {
		for i := range len(states) {
			var keys []string
			for j := range size {
				keys = append(keys, "m"+string(rune('a'+n))+string(rune('0'+j)))
				_ = i
			}
			n++
			locks = append(locks, lock{keys, "v", int64(10000 + 1000*n)})
		}
	}
	seed := func(prefix string) {
		for li, l := range locks {
			for j, k := range l.keys {
				st := states[(li+j*3)%len(states)]
				if li%len(states) == 0 {
					st = "v" // every size has a lock held on all its keys
				}
				switch st {
				case "":
				case "#":
					require.NoError(t, c.HSet(ctx, prefix+k, "f", "x").Err())
				default:
					require.NoError(t, c.Set(ctx, prefix+k, st, 0).Err())
				}
			}
		}
	}
	snapshot := func(prefix string) map[string]string {
		out := map[string]string{}
		for _, l := range locks {
			for _, k := range l.keys {
				typ := c.Type(ctx, prefix+k).Val()
				v := typ
				if typ == "string" {
					v = c.Get(ctx, prefix+k).Val()
				}
				ttl := c.PTTL(ctx, prefix+k).Val().Milliseconds()
				out[k] = v + "/" + strconv.FormatInt((ttl+500)/1000, 10)
			}
		}
		return out
	}
	prefixed := func(prefix string, keys []string) []string {
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i] = prefix + k
		}
		return out
	}

	seed("one:")
	var want []string
	for _, l := range locks {
		res, err := c.EvalSha(ctx, Extend.Hash, prefixed("one:", l.keys), l.value, l.ttl).Result()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			res, err = c.Eval(ctx, Extend.Src, prefixed("one:", l.keys), l.value, l.ttl).Result()
		}
		if err != nil {
			assert.Contains(t, err.Error(), WrongType)
			want = append(want, WrongType)
			continue
		}
		want = append(want, strconv.FormatInt(res.(int64), 10))
	}
	seed("many:")
	var keys []string
	var args []any
	for _, l := range locks {
		keys = append(keys, prefixed("many:", l.keys)...)
		args = append(args, len(l.keys), l.value, l.ttl)
	}
	res, err := c.Eval(ctx, ExtendMany.Src, keys, args...).Result()
	require.NoError(t, err)
	var got []string
	for _, r := range res.([]any) {
		switch r := r.(type) {
		case int64:
			got = append(got, strconv.FormatInt(r, 10))
		case string:
			got = append(got, r)
		default:
			t.Fatalf("ExtendMany answered %T %v", r, r)
		}
	}
	assert.Equal(t, want, got, "answers, lock by lock")
	assert.Equal(t, snapshot("one:"), snapshot("many:"), "the keys after")
	assert.Contains(t, want, "-2", "a lock written back")
	assert.Contains(t, want, "3", "a lock extended")
	assert.Contains(t, want, "0", "a lock held by another")
	assert.Contains(t, want, WrongType, "a key of another type")
}
