package lane

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/flight"
	"github.com/go-redlock/redlock/internal/redistest"
)

// gate is a fake server: while shut, every round trip waits until it is
// opened; it counts the round trips that reached it, and answers each
// script with 1.
type gate struct {
	stand
	mu     sync.Mutex
	shut   chan struct{} // nil: open
	rounds atomic.Int32
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

func (g *gate) pass() {
	g.rounds.Add(1)
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		<-shut
	}
}

func (g *gate) Do(_ context.Context, cmds []*driver.Cmd) {
	g.pass()
	for _, c := range cmds {
		c.Reply = int64(1)
	}
}

// stand is what a fake node answers besides Do.
type stand struct{}

func (stand) Info() driver.Info { return driver.Info{Addr: "fake"} }
func (stand) Subscribe(context.Context, string, bool) driver.Subscription {
	panic("a fake node has no subscriptions")
}

// recorder is a Handler that records what it is told.
type recorder struct {
	silent atomic.Int32
	done   chan Result
	held   *recorder // Held's copy's recorder
}

func newRecorder() *recorder { return &recorder{done: make(chan Result, 4)} }

func (r *recorder) Sendable() bool  { return true }
func (r *recorder) Done(res Result) { r.done <- res }
func (r *recorder) Silent(Result)   { r.silent.Add(1) }
func (r *recorder) Held() *Call {
	r.held = newRecorder()
	return &Call{Kind: Cleanup, Keys: []string{"k"}, H: r.held}
}

// result waits for r's Result.
func (r *recorder) result(t *testing.T) Result {
	t.Helper()
	select {
	case res := <-r.done:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("no Result")
		return Result{}
	}
}

const base = 50 * time.Millisecond

// newLane returns the lane of a node that sends through g, and the owner
// that counts its goroutines.
func newLane(t *testing.T, g driver.Node) (*Lane, *flight.Flight) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	owner := &flight.Flight{}
	nd := NewNode(0, driver.GoRedis(c), owner, base, &Servers{})
	nd.identify = false
	nd.SetConn(g)
	return nd.Lane("k", false), owner
}

// submit sends one Write call of kind k and returns its recorder.
func submit(l *Lane, k Kind) *recorder {
	r := newRecorder()
	l.Submit(&Call{Kind: k, Keys: []string{"k"}, Timeout: base, H: r})
	return r
}

// The breaker: closed while the node answers; open after a silence past
// the node timeout (the calls of the batch told Silent, a new call refused
// at once, unsent); half-open once the node timeout has passed again, with
// one probe out and the others refused; closed again when the probe is
// answered. The parked worker ends when the node answers.
func TestBreaker(t *testing.T) {
	g := &gate{}
	l, owner := newLane(t, g)

	res := submit(l, Write).result(t)
	require.NoError(t, res.Err)
	assert.Equal(t, int64(1), res.Reply)
	assert.False(t, res.Late, "answered in time: the lane is done with the call")
	assert.False(t, l.Sick())

	g.close()
	hung := submit(l, Write)
	require.Eventually(t, func() bool { return hung.silent.Load() == 1 }, 5*time.Second, time.Millisecond, "a silent batch is told")
	assert.True(t, l.Sick())
	rounds := g.rounds.Load()
	var te *TimeoutError
	res = submit(l, Write).result(t)
	require.ErrorAs(t, res.Err, &te)
	assert.True(t, te.CircuitOpen, "open: refused at once")
	assert.Equal(t, rounds, g.rounds.Load(), "nothing sent while open")

	time.Sleep(base + 10*time.Millisecond) // retryAt passed: the next call probes
	probe := submit(l, Write)
	require.Eventually(t, func() bool { return g.rounds.Load() == rounds+1 }, 5*time.Second, time.Millisecond, "the probe is sent")
	res = submit(l, Write).result(t)
	require.ErrorAs(t, res.Err, &te)
	assert.True(t, te.CircuitOpen, "half-open: one probe out, the others refused")

	g.open()
	assert.NoError(t, probe.result(t).Err, "the probe is answered")
	late := hung.result(t)
	assert.NoError(t, late.Err, "the parked batch ends with the node's answer")
	assert.True(t, late.Late, "its Silent came from the watchdog's goroutine: Done says so")
	assert.False(t, l.Sick(), "closed again")
	assert.NoError(t, submit(l, Write).result(t).Err)
	select {
	case <-owner.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("a worker is left")
	}
}

// A node that never answers parks at most MaxParked workers: past them it
// sends nothing, not even a probe, however many calls come.
func TestBreakerParksAtMostMaxParked(t *testing.T) {
	g := &gate{}
	l, owner := newLane(t, g)
	g.close()
	defer g.open()
	for range 200 {
		submit(l, Write)
		time.Sleep(base / 5)
	}
	l.mu.Lock()
	parked := l.parked
	l.mu.Unlock()
	assert.Equal(t, MaxParked, parked)
	assert.LessOrEqual(t, int(g.rounds.Load()), MaxParked, "a round per parked worker")
	g.open()
	select {
	case <-owner.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("parked workers are left")
	}
}

// Probe closes a lane that no call uses once its node answers: refused
// while the breaker waits (open, before its retry time) or a probe is out,
// sent after; the hung batch ends too. (A subscription waited for a call
// that its waiters' retry delay of an hour would not make.)
func TestProbeClosesAnIdleLane(t *testing.T) {
	g := &gate{}
	l, owner := newLane(t, g)
	assert.False(t, l.Probe(&Call{Kind: Write, Keys: []string{"k"}, H: newRecorder()}), "closed: no probe")
	g.close()
	hung := submit(l, Write)
	require.Eventually(t, func() bool { return hung.silent.Load() == 1 }, 5*time.Second, time.Millisecond)
	rounds := g.rounds.Load()
	assert.False(t, l.Probe(&Call{Kind: Write, Keys: []string{"k"}, H: newRecorder()}), "open, before its retry time")
	time.Sleep(base + 10*time.Millisecond)
	p := newRecorder()
	require.True(t, l.Probe(&Call{Kind: Write, Keys: []string{"k"}, H: p}), "open, past its retry time")
	require.Eventually(t, func() bool { return g.rounds.Load() == rounds+1 }, 5*time.Second, time.Millisecond, "the probe is sent")
	assert.False(t, l.Probe(&Call{Kind: Write, Keys: []string{"k"}, H: newRecorder()}), "a probe is out")
	assert.True(t, l.Sick())
	g.open()
	assert.NoError(t, p.result(t).Err)
	assert.NoError(t, hung.result(t).Err)
	assert.False(t, l.Sick(), "closed by the probe's answer")
	select {
	case <-owner.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("a worker is left")
	}
}

// A Release refused by an open breaker fails at once, and its Held copy is
// sent when the node answers again.
func TestHeldReleaseIsSentWhenTheNodeAnswers(t *testing.T) {
	g := &gate{}
	l, _ := newLane(t, g)
	g.close()
	hung := submit(l, Write)
	require.Eventually(t, func() bool { return hung.silent.Load() == 1 }, 5*time.Second, time.Millisecond)
	rel := submit(l, Release)
	var te *TimeoutError
	require.ErrorAs(t, rel.result(t).Err, &te)
	require.NotNil(t, rel.held, "a copy is held")
	g.open()
	assert.NoError(t, rel.held.result(t).Err, "the held copy is sent once the node answers")
}

// A twin's Write and Release end at once, unsent, with a *TwinError; a
// Cleanup is sent.
func TestTwinCallsAreNotSent(t *testing.T) {
	g := &gate{}
	l, _ := newLane(t, g)
	s := l.node.servers
	first := NewNode(1, driver.GoRedis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:2"})), &flight.Flight{}, base, s)
	s.identified(first, "abc")
	s.identified(l.node, "abc")
	var twin *TwinError
	require.ErrorAs(t, submit(l, Write).result(t).Err, &twin)
	assert.Equal(t, TwinError{Node: 0, First: 1, FirstAddr: "127.0.0.1:2", ID: "abc"}, *twin)
	require.ErrorAs(t, submit(l, Release).result(t).Err, &twin)
	assert.Zero(t, g.rounds.Load())
	assert.NoError(t, submit(l, Cleanup).result(t).Err)
	s.identified(l.node, "def") // restarted: a server of its own
	assert.NoError(t, submit(l, Write).result(t).Err)
}

// resends picks, after the first NOSCRIPT of a batch, the calls the node
// lacked and the later calls that ran on their keys.
func TestResends(t *testing.T) {
	noscript := redis.ErrNoScript
	call := func(k Kind, key string, err error) *Call {
		return &Call{Kind: k, Keys: []string{key}, res: Result{Err: err}}
	}
	acq := func(key string, err error) *Call { return call(Write, key, err) }
	rel := func(key string, err error) *Call { return call(Release, key, err) }
	cases := []struct {
		name  string
		batch []*Call
		want  []int // indexes into batch
	}{
		{"no NOSCRIPT", []*Call{acq("a", nil), rel("a", nil)}, nil},
		{"acquire lacked, its release ran", []*Call{acq("a", noscript), rel("a", nil)}, []int{0, 1}},
		{"before the first NOSCRIPT stays", []*Call{rel("a", nil), acq("a", noscript), acq("b", nil)}, []int{1}},
		{"chained through a re-sent key", []*Call{acq("a", noscript), {Kind: Write, Keys: []string{"a", "b"}}, rel("b", nil), rel("c", nil)}, []int{0, 1, 2}},
		{"a network error did not surely run", []*Call{acq("a", noscript), rel("a", errors.New("read: connection reset"))}, []int{0}},
	}
	for _, tc := range cases {
		var want []*Call
		for _, i := range tc.want {
			want = append(want, tc.batch[i])
		}
		assert.Equal(t, want, resends(tc.batch, true), tc.name)
	}

	// A detached worker's batch: only its releases go again.
	late := []*Call{acq("a", noscript), rel("a", noscript), call(Cleanup, "b", noscript), acq("b", nil)}
	assert.Equal(t, []*Call{late[1], late[2]}, resends(late, false), "after a silence")
}

// A node is named for people by its address, never with its password.
func TestAddrOf(t *testing.T) {
	addr := func(c redis.UniversalClient) string { return driver.GoRedis(c).Info().Addr }
	c := redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379", Password: "pw", DB: 2})
	defer c.Close()
	assert.Equal(t, "10.0.0.1:6379/2", addr(c))
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"a:7000", "b:7000"}, Password: "pw"})
	defer cc.Close()
	assert.Equal(t, "cluster a:7000,b:7000", addr(cc))
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"s:26379"}})
	defer fc.Close()
	assert.Equal(t, "sentinel failover group", addr(fc))
}

// scripted is a fake server whose every round trip (one call alone, or a
// pipeline) does what do says for its number (1 for the first) and whether
// it carries the scripts' source.
type scripted struct {
	stand
	rounds atomic.Int32
	do     func(round int32, src bool) (any, error)
}

func (s *scripted) Do(_ context.Context, cmds []*driver.Cmd) {
	round := s.rounds.Add(1)
	for _, c := range cmds {
		c.Reply, c.Err = s.do(round, c.Args[0] == "eval")
	}
}

// handler is a Handler whose Silent runs slow before it says what it got.
type handler struct {
	slow   time.Duration
	began  chan struct{} // Silent began
	silent chan Result
	done   chan Result
}

func newHandler(slow time.Duration) *handler {
	return &handler{slow: slow, began: make(chan struct{}, 1), silent: make(chan Result, 1), done: make(chan Result, 1)}
}

func (h *handler) Sendable() bool  { return true }
func (h *handler) Done(r Result)   { h.done <- r }
func (h *handler) Held() *Call     { return nil }
func (h *handler) Silent(r Result) { h.began <- struct{}{}; time.Sleep(h.slow); h.silent <- r }

// A silent batch's watchdog reads nothing that a later send of one of its
// calls writes. Here the watchdog tells a slow Write first; meanwhile the
// Cleanup after it, held for want of a reply, is sent again, answers
// NOSCRIPT, and goes a second time with its source, which records what its
// first run answered. The watchdog then tells the Cleanup of its silent
// round (a first round: nothing ran before it), with no First, and reads
// no field the other worker wrote (go test -race reported one, in about one
// run of five of a probe with SCRIPT FLUSH storms and a flapping node).
func TestSilentRoundReadsNothingAResendWrites(t *testing.T) {
	r1, r2 := make(chan struct{}), make(chan struct{})
	s := &scripted{do: func(round int32, src bool) (any, error) {
		switch {
		case round == 1: // the first call, alone: on time
			<-r1
			return int64(1), nil
		case round == 2: // the slow Write and the Cleanup: no reply
			<-r2
			return nil, context.DeadlineExceeded
		case !src: // the held Cleanup sent again: the node lacks the script
			return nil, redis.ErrNoScript
		default:
			return int64(1), nil
		}
	}}
	l, owner := newLane(t, s)
	first := newHandler(0)
	l.Submit(&Call{Kind: Write, Keys: []string{"k"}, Timeout: 10 * time.Second, H: first})
	require.Eventually(t, func() bool { return s.rounds.Load() == 1 }, 5*time.Second, time.Millisecond)
	slow, cleanup := newHandler(500*time.Millisecond), newHandler(0)
	l.Submit(&Call{Kind: Write, Keys: []string{"k"}, Timeout: base, H: slow})
	l.Submit(&Call{Kind: Cleanup, Keys: []string{"k"}, Timeout: base, H: cleanup})
	close(r1) // the worker takes both, in one batch
	require.NoError(t, (<-first.done).Err)
	select {
	case <-slow.began: // the watchdog fired, and tells the slow Write first
	case <-time.After(5 * time.Second):
		t.Fatal("the batch was not seen silent")
	}
	close(r2) // no reply: the Cleanup is held, and sent again one node timeout later
	select {
	case r := <-cleanup.done:
		require.NoError(t, r.Err, "the held Cleanup, sent again with its source")
		require.NotNil(t, r.First, "its second run says what the first answered")
	case <-time.After(5 * time.Second):
		t.Fatal("the held Cleanup was not sent again")
	}
	r := <-cleanup.silent
	var te *TimeoutError
	assert.ErrorAs(t, r.Err, &te)
	assert.Nil(t, r.First, "the silent round was the Cleanup's first")
	assert.Equal(t, int32(4), s.rounds.Load())
	<-slow.silent
	select {
	case <-owner.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("a worker is left")
	}
}

// manyCalls groups the calls that may run out of their batch's order: each
// with a Many and keys no other call of the batch has; per hash slot on a
// Cluster; none with an Ack; and up to maxManyCalls a group.
func TestManyCallsGroupOnlyCallsThatCommute(t *testing.T) {
	t.Parallel()
	m := &Many{Hash: "h", Src: "s"}
	call := func(many *Many, keys ...string) *Call { return &Call{Many: many, merge: many != nil, Keys: keys} }
	a, b := call(m, "{x}a"), call(m, "{x}b")
	rel := call(nil, "{x}c")                // no Many: alone
	c1, c2 := call(m, "{x}c"), call(m, "d") // c1 shares its key with rel: alone, in its place
	acked := call(m, "e")
	acked.Ack = &Ack{}
	calls := []*Call{a, rel, b, c1, acked, c2}

	lead := manyCalls(calls, false)
	require.Len(t, lead, 1)
	assert.Equal(t, []*Call{a, b, c2}, lead[a].calls, "one group, led by the first")

	lead = manyCalls(calls, true)
	assert.Equal(t, []*Call{a, b}, lead[a].calls, "{x} and d are in different slots")
	assert.Equal(t, []*Call{c2}, lead[c2].calls)

	var big []*Call
	for i := range maxManyCalls + 1 {
		big = append(big, call(m, "k"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	lead = manyCalls(big, false)
	assert.Len(t, lead[big[0]].calls, maxManyCalls)
	assert.Len(t, lead[big[maxManyCalls]].calls, 1)
	assert.Nil(t, manyCalls([]*Call{a}, false), "one call")
}

// reuser is a Handler whose Sendable says no and, as the Handler contract
// lets it, reuses its call at once (here: as a Release, which would be
// sent whatever Sendable says).
type reuser struct {
	c    *Call
	done atomic.Int32
}

func (r *reuser) Sendable() bool { r.c.Kind = Release; return false }
func (r *reuser) Done(Result)    { r.done.Add(1) }
func (r *reuser) Silent(Result)  {}
func (r *reuser) Held() *Call    { return nil }

// A Write whose Sendable said no is the Handler's again at once: the lane
// reads nothing of it afterwards (it read its Kind first), sends nothing
// and tells nothing.
func TestUnsendableWriteIsNotReadAgain(t *testing.T) {
	t.Parallel()
	g := &gate{}
	l, owner := newLane(t, g)
	r := &reuser{}
	r.c = &Call{Kind: Write, Keys: []string{"k"}, Timeout: base, H: r}
	l.Submit(r.c)
	select {
	case <-owner.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not end")
	}
	assert.Zero(t, g.rounds.Load(), "not sent")
	assert.Zero(t, r.done.Load(), "not told")
}

// slow is a fake server that answers each round trip after a delay.
type slow struct {
	stand
	delay time.Duration
}

func (s slow) Do(_ context.Context, cmds []*driver.Cmd) {
	time.Sleep(s.delay)
	for _, c := range cmds {
		c.Reply = int64(1)
	}
}

// A process stopped while a round is out (for 3 node timeouts, within what the
// watchdog adds at most, the answer coming during the stop) has the answer
// on time: the watchdog, due during the stop, waits as long as the process
// was stopped; the call is not told Silent, and the round trip the lane
// learnt is the node's, not the stop's. Before, the watchdog ran first
// when the process ran again, and the node looked silent.
//
// Not parallel: it stops the whole process.
func TestStoppedProcessIsNotTheNodesSilence(t *testing.T) {
	l, _ := newLane(t, slow{delay: 40 * time.Millisecond})
	for range 3 {
		stopped := redistest.StopProcess(t, 5*time.Millisecond, 150*time.Millisecond)
		begin := time.Now()
		r := submit(l, Write)
		res := r.result(t)
		<-stopped
		require.GreaterOrEqual(t, time.Since(begin), 120*time.Millisecond, "the process was not stopped while the round was out")
		assert.NoError(t, res.Err, "the call's answer")
		assert.False(t, res.Late, "the answer came late")
		assert.Zero(t, r.silent.Load(), "the call was told Silent")
		assert.Less(t, l.RoundTrip(), 100*time.Millisecond, "the round trip learnt")
	}
}

// A round that stays silent through a stop longer than what the watchdog
// adds (4 node timeouts) is silent once the process runs again, and its
// error says how long the process was paused. Not parallel: it stops the
// whole process.
func TestSilenceThroughAStopSaysThePause(t *testing.T) {
	g := &gate{}
	g.close()
	defer g.open()
	l, _ := newLane(t, g)
	stopped := redistest.StopProcess(t, 5*time.Millisecond, 300*time.Millisecond)
	r := newRecorder()
	var silent atomic.Pointer[Result]
	h := &silentRecorder{recorder: r, silent: &silent}
	l.Submit(&Call{Kind: Write, Keys: []string{"k"}, Timeout: base, H: h})
	<-stopped
	require.Eventually(t, func() bool { return silent.Load() != nil }, 5*time.Second, time.Millisecond, "the round was never silent")
	var te *TimeoutError
	require.ErrorAs(t, silent.Load().Err, &te)
	assert.GreaterOrEqual(t, te.Paused, 250*time.Millisecond, "the pause the silence's error names (a stop of 300ms)")
}

// silentRecorder is a recorder that keeps what Silent was told.
type silentRecorder struct {
	*recorder
	silent *atomic.Pointer[Result]
}

func (s *silentRecorder) Silent(r Result) { s.silent.Store(&r) }
