package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/lane"
	"github.com/go-redlock/redlock/internal/redistest"
	"github.com/go-redlock/redlock/internal/script"
)

// drift = round(f*ttl) + 2ms, with node-redlock's numbers.
func TestDrift(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f    float64
		ttl  time.Duration
		want time.Duration
	}{
		{0.01, 5000 * time.Millisecond, 52 * time.Millisecond},
		{0.01, 10000 * time.Millisecond, 102 * time.Millisecond},
		{0.01, 50 * time.Millisecond, 3 * time.Millisecond}, // 0.5 rounds up
		{0.01, 49 * time.Millisecond, 2 * time.Millisecond},
		{0, time.Hour, 2 * time.Millisecond},
		{0.5, 200 * time.Millisecond, 102 * time.Millisecond},
		{0, 2 * time.Millisecond, 2 * time.Millisecond},   // capped: no validity
		{0.5, 3 * time.Millisecond, 3 * time.Millisecond}, // round(1.5)+2 = 4 > 3: capped
		{0.9999999999999999, math.MaxInt64 / time.Millisecond * time.Millisecond, math.MaxInt64 / time.Millisecond * time.Millisecond}, // no overflow
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, drift(tc.f, tc.ttl), "drift(%v, %v)", tc.f, tc.ttl)
	}
}

func TestValidateTTL(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	for _, ttl := range []time.Duration{time.Millisecond * 3, time.Second, 24 * time.Hour, math.MaxInt64 / time.Millisecond * time.Millisecond} {
		assert.NoError(t, validateTTL(ttl, &cfg), "validateTTL(%v)", ttl)
	}
	for _, ttl := range []time.Duration{0, -1, -time.Second, time.Millisecond, 2 * time.Millisecond, 1500 * time.Microsecond, time.Nanosecond, math.MinInt64} {
		err := validateTTL(ttl, &cfg)
		assert.ErrorIs(t, err, ErrInvalidArgument, "validateTTL(%v)", ttl)
	}
	assert.ErrorContains(t, validateTTL(1500*time.Microsecond, &cfg), "1.5ms is not a whole number of milliseconds")
}

func TestValidateResources(t *testing.T) {
	t.Parallel()
	assert.NoError(t, validateResources([]string{"a"}))
	assert.NoError(t, validateResources([]string{"a", "b", "{x}c"}))
	for _, rs := range [][]string{nil, {}, {""}, {"a", ""}, {"a", "a"}, {"a", "b", "a"}} {
		assert.ErrorIs(t, validateResources(rs), ErrInvalidArgument, "validateResources(%q)", rs)
	}
	assert.ErrorContains(t, validateResources([]string{"a", "b", "a"}), `resources[2] "a" duplicates resources[0]`)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := []Option{
		WithDriftFactor(0), WithDriftFactor(0.999), WithRetryCount(-1), WithRetryCount(0),
		WithRetryDelay(0), WithRetryJitter(0), WithAutomaticExtensionThreshold(0),
		WithNodeTimeout(time.Millisecond), WithNodeTimeout(24 * time.Hour), WithRetryDelay(24 * time.Hour),
		WithRetryJitter(24 * time.Hour), WithAutomaticExtensionThreshold(24 * time.Hour), WithErrorHandler(nil), nil,
	}
	base := defaultConfig()
	for i, o := range ok {
		_, err := with(&base, []Option{o})
		assert.NoError(t, err, "option %d", i)
	}
	bad := map[string]Option{
		"drift factor -0.1":         WithDriftFactor(-0.1),
		"drift factor 1":            WithDriftFactor(1),
		"drift factor NaN":          WithDriftFactor(math.NaN()),
		"drift factor +Inf":         WithDriftFactor(math.Inf(1)),
		"retry count -2":            WithRetryCount(-2),
		"retry delay -1ns":          WithRetryDelay(-1),
		"retry jitter -1ns":         WithRetryJitter(-1),
		"automatic extension -1ns":  WithAutomaticExtensionThreshold(-1),
		"node timeout 0s":           WithNodeTimeout(0),
		"node timeout -1s":          WithNodeTimeout(-time.Second),
		"retry count math.MinInt64": WithRetryCount(math.MinInt),
		// Issue 11, item 10: values that made calls meaningless or overflowed.
		"node timeout 1ns":           WithNodeTimeout(time.Nanosecond),
		"node timeout 999us":         WithNodeTimeout(999 * time.Microsecond),
		"node timeout max":           WithNodeTimeout(math.MaxInt64),
		"retry delay max":            WithRetryDelay(math.MaxInt64),
		"retry jitter max":           WithRetryJitter(math.MaxInt64),
		"retry delay 24h+1ns":        WithRetryDelay(24*time.Hour + 1),
		"automatic extension max":    WithAutomaticExtensionThreshold(math.MaxInt64),
		"automatic extension 24h+1s": WithAutomaticExtensionThreshold(24*time.Hour + time.Second),
	}
	for name, o := range bad {
		_, err := with(&base, []Option{o})
		assert.ErrorIs(t, err, ErrInvalidArgument, "option %s", name)
	}
	// The last option wins; the base is not changed.
	c, err := with(&base, []Option{WithRetryCount(3), WithRetryCount(5)})
	require.NoError(t, err)
	assert.Equal(t, 5, c.retryCount)
	assert.Equal(t, 10, base.retryCount)
}

func TestRetryDelayRange(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	for range 10000 {
		d := retryDelay(&cfg)
		require.True(t, d >= 100*time.Millisecond && d < 300*time.Millisecond, "retryDelay = %v, want [100ms, 300ms)", d)
	}
	cfg.retryDelay, cfg.retryJitter = 10*time.Millisecond, 50*time.Millisecond
	for range 10000 {
		require.GreaterOrEqual(t, retryDelay(&cfg), time.Duration(0))
	}
	cfg.retryJitter = 0
	assert.Equal(t, 10*time.Millisecond, retryDelay(&cfg))
}

func TestRandomValue(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		v := (&config{}).newValue()
		require.Len(t, v, 32)
		require.False(t, seen[v], "randomValue repeated %s", v)
		seen[v] = true
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	a := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = a.Close() })
	var typedNil *redis.Client
	cases := map[string][]redis.UniversalClient{
		"no clients":   nil,
		"empty":        {},
		"nil client":   {a, nil},
		"typed nil":    {typedNil},
		"same client":  {a, a},
		"typed nil #2": {a, typedNil},
	}
	for name, cs := range cases {
		rl, err := New(cs)
		assert.ErrorIs(t, err, ErrInvalidArgument, "New(%s)", name)
		assert.Nil(t, rl, "New(%s)", name)
	}
	_, err := New([]redis.UniversalClient{a}, WithDriftFactor(2))
	assert.ErrorIs(t, err, ErrInvalidArgument)
	rl, err := New([]redis.UniversalClient{a})
	require.NoError(t, err)
	assert.Equal(t, 1, rl.Nodes())
	assert.Equal(t, 1, rl.Quorum())
}

// newFake returns a Redlock whose nodes are fakes: each node's client
// (never dialled) is replaced by its fake for every script call. The fakes
// have no pub/sub: no waking on release.
func newFake(t testing.TB, fakes []*redistest.Fake, opts ...Option) *Redlock {
	t.Helper()
	cs := make([]redis.UniversalClient, len(fakes))
	for i := range fakes {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)})
		t.Cleanup(func() { _ = c.Close() })
		cs[i] = c
	}
	rl, err := New(cs, append([]Option{WithWakeOnRelease(false)}, opts...)...)
	require.NoError(t, err)
	for i, f := range fakes {
		rl.nodes[i].SetConn(f)
	}
	return rl
}

// The vote counting: an attempt is decided as soon as a quorum for, or a
// quorum out of reach, is certain.
func TestVoteCounting(t *testing.T) {
	t.Parallel()
	yes := func() *redistest.Fake { return &redistest.Fake{Result: int64(1)} }
	no := func() *redistest.Fake { return &redistest.Fake{Result: int64(0)} }
	broken := func() *redistest.Fake { return &redistest.Fake{Err: errors.New("boom")} }
	weird := func() *redistest.Fake { return &redistest.Fake{Result: "OK"} }
	cases := []struct {
		name       string
		nodes      []*redistest.Fake
		wantOK     bool
		wantLocked bool // the failure matches ErrResourceLocked
	}{
		{"1 yes", []*redistest.Fake{yes()}, true, false},
		{"1 no", []*redistest.Fake{no()}, false, true},
		{"3 two yes", []*redistest.Fake{yes(), no(), yes()}, true, false},
		{"3 two no", []*redistest.Fake{no(), yes(), no()}, false, true},
		{"3 one no one broken", []*redistest.Fake{no(), yes(), broken()}, false, false},
		{"3 broken minority", []*redistest.Fake{yes(), broken(), yes()}, true, false},
		{"3 non-integer result", []*redistest.Fake{weird(), weird(), yes()}, false, false},
		{"4 split", []*redistest.Fake{yes(), yes(), no(), no()}, false, true},
		{"4 three yes", []*redistest.Fake{yes(), yes(), no(), yes()}, true, false},
		{"5 three yes", []*redistest.Fake{no(), yes(), no(), yes(), yes()}, true, false},
		{"5 three no", []*redistest.Fake{no(), yes(), no(), yes(), no()}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rl := newFake(t, tc.nodes, WithRetryCount(0))
			l, err := rl.Acquire(context.Background(), []string{"k"}, time.Second)
			if tc.wantOK {
				require.NoError(t, err)
				assert.GreaterOrEqual(t, len(l.Attempts()[0].VotesFor), rl.Quorum())
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.wantLocked, errors.Is(err, ErrResourceLocked), "errors.Is(%v, ErrResourceLocked)", err)
		})
	}
}

// A hung node never holds an attempt past the per-node timeout, and a
// decided attempt does not wait for it at all.
func TestHungFakeNode(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	defer close(hang)
	nodes := []*redistest.Fake{{Result: int64(1)}, {Result: int64(1)}, {Hang: hang}}
	rl := newFake(t, nodes, WithNodeTimeout(time.Hour))
	l, err := rl.Acquire(context.Background(), []string{"k"}, time.Second)
	require.NoError(t, err, "Acquire with a hung minority")
	assert.ElementsMatch(t, []int{0, 1}, l.Attempts()[0].VotesFor)

	nodes[0].Result = int64(0)
	rl = newFake(t, nodes, WithNodeTimeout(20*time.Millisecond), WithRetryCount(0))
	_, err = rl.Acquire(context.Background(), []string{"k"}, time.Second)
	var ee *ExecutionError
	require.ErrorAs(t, err, &ee)
	var te *NodeTimeoutError
	found := false
	for _, v := range ee.Attempts[0].VotesAgainst {
		if errors.As(v, &te) {
			found = true
			assert.Equal(t, 2, v.Node)
		}
	}
	assert.True(t, found, "the hung node's vote is a timeout: %v", ee.Attempts[0].VotesAgainst)
}

// The scripts' semantics, on miniredis for speed (the real-node tests cover
// them on redis-server).
// runScript runs s on c as a lane does: EVALSHA, then the script itself
// when the node lacks it.
func runScript(ctx context.Context, c redis.UniversalClient, s *script.Script, keys []string, args []any) error {
	res, err := c.EvalSha(ctx, s.Hash, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, err = c.Eval(ctx, s.Src, keys, args...).Result()
	}
	op := map[*script.Script]Op{script.Acquire: OpAcquire, script.Extend: OpExtend, script.Release: OpRelease}[s]
	_, verr := judge(op, s, len(keys), lane.Result{Reply: res, Err: err})
	return verr
}

func TestScriptsOnMiniredis(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	keys := []string{"a", "b"}

	require.NoError(t, runScript(ctx, c, script.Acquire, keys, []any{"v1", 1000}))
	assert.Equal(t, int64(1000), mr.TTL("a").Milliseconds())
	// Our own value does not block a retry; another does.
	require.NoError(t, runScript(ctx, c, script.Acquire, keys, []any{"v1", 2000}))
	err := runScript(ctx, c, script.Acquire, keys, []any{"v2", 1000})
	var rle *ResourceLockedError
	require.ErrorAs(t, err, &rle)
	assert.Equal(t, int64(0), rle.Applied)
	assert.ErrorIs(t, err, ErrResourceLocked)
	// All or nothing: one taken key keeps the other free.
	require.NoError(t, c.Set(ctx, "c", "other", 0).Err())
	require.Error(t, runScript(ctx, c, script.Acquire, []string{"c", "d"}, []any{"v3", 1000}))
	assert.False(t, mr.Exists("d"))

	require.NoError(t, runScript(ctx, c, script.Extend, keys, []any{"v1", 5000}))
	assert.Equal(t, int64(5000), mr.TTL("b").Milliseconds())
	err = runScript(ctx, c, script.Extend, keys, []any{"v2", 5000})
	assert.ErrorIs(t, err, ErrLockExpired)

	// Release counts only the keys that held the value.
	require.NoError(t, c.Set(ctx, "b", "thief", 0).Err())
	err = runScript(ctx, c, script.Release, keys, []any{"v1"})
	require.ErrorAs(t, err, &rle)
	assert.Equal(t, int64(1), rle.Applied)
	assert.False(t, mr.Exists("a"))
	assert.True(t, mr.Exists("b"))
}

// replyErr is an error reply, as go-redis gives it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// The replies not produced on a real node in errors_test.go (the server
// would have to be configured to give them) are classed as refusals too;
// replies a failover or time can change are retried.
func TestRefusalClasses(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{"ERR unknown command 'evalsha', with args beginning with: ", "DENIED Redis is running in protected mode"} {
		rl := newFake(t, []*redistest.Fake{{Err: replyErr(msg)}}, WithRetryCount(5), WithRetryDelay(time.Millisecond))
		_, err := rl.Acquire(context.Background(), []string{"k"}, time.Second)
		var ee *ExecutionError
		require.ErrorAs(t, err, &ee)
		assert.Len(t, ee.Attempts, 1, msg)
		assert.Contains(t, err.Error(), "retrying cannot fix", msg)
	}
	for _, msg := range []string{"READONLY You can't write against a read only replica.", "LOADING Redis is loading the dataset in memory", "CLUSTERDOWN The cluster is down", "BUSY Redis is busy running a script"} {
		rl := newFake(t, []*redistest.Fake{{Err: replyErr(msg)}}, WithRetryCount(2), WithRetryDelay(time.Millisecond))
		_, err := rl.Acquire(context.Background(), []string{"k"}, time.Second)
		var ee *ExecutionError
		require.ErrorAs(t, err, &ee)
		assert.Len(t, ee.Attempts, 3, msg)
	}
}

// Redis 6.2 wraps the error a script's command raised in words of its own;
// the refusal inside is still one (the matrix's 6.2 run retried an ACL
// refusal and a WRONGTYPE for all 11 attempts).
func TestScriptErrorsOfRedis62(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"ERR Error running script (call to f_e17e632e2ec9125e0ecf09d7a37a0c467ff441cf): @user_script:4: @user_script: 4: The user executing the script can't run this command or subcommand": "ERR The user executing the script can't run this command or subcommand",
		"ERR Error running script (call to f_e17e632e2ec9125e0ecf09d7a37a0c467ff441cf): @user_script:4: WRONGTYPE Operation against a key holding the wrong kind of value":                   "WRONGTYPE Operation against a key holding the wrong kind of value",
		"WRONGTYPE Operation against a key holding the wrong kind of value": "WRONGTYPE Operation against a key holding the wrong kind of value",
		// caught in ExtendMany (redis.pcall) and answered as a lock's reply (helper-20's probe: retried, not refused)
		"@user_script: 28: The user executing the script can't run this command or subcommand":                                                                   "ERR The user executing the script can't run this command or subcommand",
		"ERR ACL failure in script: User noset has no permissions to run the 'get' command script: e17e632e2ec9125e0ecf09d7a37a0c467ff441cf, on @user_script:4.": "ERR ACL failure in script: User noset has no permissions to run the 'get' command script: e17e632e2ec9125e0ecf09d7a37a0c467ff441cf, on @user_script:4.",
	} {
		assert.Equal(t, want, scriptError(msg))
		assert.NotNil(t, refused(replyErr(msg)), msg)
	}
	assert.Nil(t, refused(replyErr("ERR Error running script (call to f_e17e): @user_script:4: READONLY You can't write against a read only replica.")),
		"a wrapped reply that a failover can change is retried")
}

// A fenced script's answer: {applied, highest counter} for the acquire, a
// count of resources (half its KEYS) for the write-back; anything else is
// an unexpected result, never a vote for.
func TestFencedJudge(t *testing.T) {
	t.Parallel()
	keys := []string{"a", "b"} // the resources; their counters follow them in KEYS
	reply := func(v any) lane.Result { return lane.Result{Reply: v} }
	rep, err := judge(OpAcquire, script.FencedAcquire, len(keys), reply([]any{int64(2), int64(7)}))
	assert.NoError(t, err)
	assert.Equal(t, uint64(7), rep.Counter)
	var rle *ResourceLockedError
	_, err = judge(OpAcquire, script.FencedAcquire, len(keys), reply([]any{int64(0), int64(0)}))
	assert.ErrorAs(t, err, &rle)
	for _, bad := range []any{int64(2), []any{int64(2)}, []any{int64(2), int64(-1)}, []any{int64(2), int64(script.MaxToken)}, []any{"2", int64(1)}} {
		var ue *unexpectedResult
		_, err = judge(OpAcquire, script.FencedAcquire, len(keys), reply(bad))
		assert.ErrorAs(t, err, &ue, "%#v", bad)
	}
	_, err = judge(OpFence, script.WriteBack, len(keys), reply(int64(2)))
	assert.NoError(t, err)
	_, err = judge(OpFence, script.WriteBack, len(keys), reply(int64(0)))
	assert.ErrorAs(t, err, &rle)
	assert.Equal(t, OpFence, rle.Op)
	assert.ErrorIs(t, rle, ErrLockExpired)
	assert.Equal(t, []string{"a", "b", "redlock:fence:{a}:a", "redlock:fence:{b}:b"}, fencedKeys(keys))
}

// A first round that reaches its quorum with no validity left sends no
// write-back, and the error says so rather than "written back".
func TestWriteBackWithNoValidityLeft(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	fakes := []*redistest.Fake{{Result: int64(1)}, {Result: int64(1)}, {Result: int64(1)}}
	rl := newFake(t, fakes)
	for _, nd := range rl.nodes {
		nd.SetConn(countingScripter{nd.Conn(), &calls})
	}
	p := fencedAcquirePlan([]string{"k"}, time.Second)
	st := ExecutionStats{Start: time.Now().Add(-time.Second), MembershipSize: 3, QuorumSize: 2, VotesFor: []int{0, 1}}
	as := &attemptState{nodes: make([]nodeCall, 3)}
	got, token := rl.writeBack(context.Background(), rl.cfg, p, "v", st, as, 990*time.Millisecond)
	assert.True(t, got.Late)
	assert.Equal(t, uint64(1), token)
	assert.Zero(t, calls.Load(), "no write-back sent")
	msg := tally(OpAcquire, got, 0, 0)
	assert.Contains(t, msg, "too late to write its fencing token back")
	assert.NotContains(t, msg, "was written back")
}

// countingScripter counts the commands a node is sent.
type countingScripter struct {
	driver.Node
	n *atomic.Int32
}

func (c countingScripter) Do(ctx context.Context, cmds []*driver.Cmd) {
	c.n.Add(int32(len(cmds)))
	c.Node.Do(ctx, cmds)
}

// fenceKey is cheap for every resource: the odd ones (a '}' and no hash
// tag) take their slot's cached tag.
func BenchmarkFenceKey(b *testing.B) {
	for _, res := range []string{"orders:12345", "{orders}:1", "}", "job}7"} {
		b.Run(res, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = fenceKey(res)
			}
		})
	}
}

// rerun counts a release's deletes of both runs when a lane sent it twice
// (internal/lane's resends), and a first run that deleted every key stands.
func TestRerun(t *testing.T) {
	t.Parallel()
	gone := &ResourceLockedError{Op: OpRelease, Requested: 2}
	one := &ResourceLockedError{Op: OpRelease, Applied: 1, Requested: 2}
	assert.NoError(t, rerun(nil, gone), "first run deleted both keys")
	assert.NoError(t, rerun(nil, errors.New("EOF")), "a lost second answer does not undo the first run's deletes")
	assert.NoError(t, rerun(one, one), "one key in each run")
	assert.Equal(t, one, rerun(gone, one))
	two := lane.Result{Reply: int64(1), First: &lane.Result{Reply: int64(1)}}
	_, err := judge(OpRelease, script.Release, 2, two)
	assert.NoError(t, err, "judged on both runs")
	_, err = judge(OpAcquire, script.Acquire, 2, lane.Result{Reply: int64(0), First: &lane.Result{Reply: int64(2)}})
	assert.Error(t, err, "an acquire's second answer stands")
}

// A node is named for people by its address, never with its password.
func TestAddrOf(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379", Password: "pw", DB: 2})
	defer c.Close()
	assert.Equal(t, "10.0.0.1:6379/2", driver.GoRedis(c).Info().Addr)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"a:7000", "b:7000"}, Password: "pw"})
	defer cc.Close()
	assert.Equal(t, "cluster a:7000,b:7000", driver.GoRedis(cc).Info().Addr)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s:26379"}})
	defer fc.Close()
	assert.Equal(t, "sentinel failover group", driver.GoRedis(fc).Info().Addr)
	assert.Equal(t, "redlock: acquire on node 1 (10.0.0.1:6379/2): x", (&NodeError{Node: 1, Addr: driver.GoRedis(c).Info().Addr, Op: OpAcquire, Err: errors.New("x")}).Error())
}

// Using's extender never starts an extension once fn has returned (halt),
// even when its timer fired meanwhile: the timer's call finds it over and
// touches nothing (a nil Lock here).
func TestExtenderStartsNothingOnceHalted(t *testing.T) {
	t.Parallel()
	e := &extender{over: true}
	require.NotPanics(t, e.due, "an extension after fn returned")
	require.NotPanics(t, e.atCancelPoint)
	require.NotPanics(t, func() { e.lost(errors.New("lost")) })
}

// halt waits for Using's extension on its way; a term's (abort) it cuts
// short and does not wait for (a hook of that extension's may be what
// resigns the term). Either way the next extension's timer stops, and the
// cancel point's is left to the extension on its way.
func TestExtenderHaltWaitsForUsingsExtension(t *testing.T) {
	t.Parallel()
	for _, abort := range []bool{false, true} {
		var cut atomic.Bool
		e := &extender{abort: abort, flight: true, xcancel: func() { cut.Store(true) },
			next: time.NewTimer(time.Hour), end: time.NewTimer(time.Hour)}
		e.landed.Add(1) // the extension on its way
		halted := make(chan struct{})
		go func() {
			e.halt()
			close(halted)
		}()
		if abort {
			<-halted
		} else {
			select {
			case <-halted:
				t.Fatal("Using's halt returned with the extension on its way")
			case <-time.After(50 * time.Millisecond):
			}
		}
		assert.Equal(t, abort, cut.Load(), "abort %v: the extension cut short", abort)
		e.landed.Done()
		<-halted
		assert.False(t, e.next.Stop(), "the next extension's timer stopped")
		assert.True(t, e.end.Stop(), "abort %v: the cancel point's timer left for the extension on its way", abort)
	}
}

// The pause after a split is random, below twice the attempt's time (at
// least a millisecond), doubled for each split in a row.
func TestSplitPauseIsBoundedAndGrows(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 4; n++ {
		bound := 2 * 5 * time.Millisecond << (n - 1)
		seen := time.Duration(0)
		for range 200 {
			d := splitPause(5*time.Millisecond, n)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, bound, "split %d in a row", n)
			seen = max(seen, d)
		}
		require.Greater(t, seen, bound/2, "200 draws below %v reach past its half", bound)
	}
	require.Less(t, splitPause(0, 1), time.Millisecond)
	require.LessOrEqual(t, splitPause(time.Hour, 60), time.Hour) // no overflow
}

// A node that does not answer may hold anyone's value, yet on 5 nodes one
// such node cannot make a quorum (3) for any value the others named once:
// the split pauses short. On 3 nodes it can (2): the call waits its retry
// delay, which a release's announcement would end. (Fakes: the holders
// answer 100 ms after the free node, so that the free node's vote is in
// before the attempt is decided, whatever the machine's load.)
func TestSplitPauseWithASilentNode(t *testing.T) {
	t.Parallel()
	holder := func(v string) *redistest.Fake {
		return &redistest.Fake{Result: []any{int64(0), v}, Delay: 100 * time.Millisecond}
	}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	rl := newFake(t, []*redistest.Fake{{Result: int64(1)}, holder("0000000000000001"), holder("0000000000000002"),
		holder("0000000000000003"), {Hang: hang}}, WithNodeTimeout(time.Second))
	began := time.Now()
	_, err := rl.Acquire(context.Background(), []string{"k"}, time.Minute, WithRetryCount(3), WithRetryDelay(time.Hour), WithRetryJitter(0))
	var ee *ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Len(t, ee.Attempts, 4)
	require.Less(t, time.Since(began), time.Minute, "5 nodes, 1 silent: no retry delay of an hour")

	hang3 := make(chan struct{})
	t.Cleanup(func() { close(hang3) })
	rl3 := newFake(t, []*redistest.Fake{{Result: int64(1)}, holder("0000000000000001"), {Hang: hang3}}, WithNodeTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = rl3.Acquire(ctx, []string{"k"}, time.Minute, WithRetryCount(3), WithRetryDelay(time.Hour), WithRetryJitter(0))
	require.ErrorIs(t, err, context.DeadlineExceeded, "3 nodes, 1 silent: it may hold the other value's quorum")
	require.ErrorAs(t, err, &ee)
	require.Len(t, ee.Attempts, 1, "one attempt, then its retry delay")
}

// TestAttemptStateLetGoTwicePanics: a state let go once more than it was
// held, or read by a handler after it was marked released (poisonStates,
// as the suite runs), panics rather than being reused by two attempts at
// once; a kept state is neither reused nor marked.
func TestAttemptStateLetGoTwicePanics(t *testing.T) {
	t.Parallel()
	marked := &attemptState{}
	marked.refs.Store(released)
	require.Panics(t, func() { marked.live() }, "read after its last reference was let go")
	require.Panics(t, func() { marked.unref() }, "let go once more")
	require.Panics(t, func() { (&attemptState{}).unref() }, "let go more often than held")

	kept := newAttemptState(3)
	kept.refs.Add(1) // a call's
	kept.kept.Store(true)
	kept.unref()
	kept.unref()
	require.NotPanics(t, func() { kept.live() })
	require.Zero(t, kept.refs.Load(), "neither reused nor marked")
	require.Len(t, kept.nodes, 3, "not cleared")
}
