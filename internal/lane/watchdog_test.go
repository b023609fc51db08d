package lane

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// idleDog returns the lane's idle watchdog.
func (l *Lane) idleDog() *watchdog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dog
}

// A round answered in time leaves its watchdog idle for the next round,
// which reuses it; a watchdog that fired belongs to its round for good: the
// lane never takes it back, and its state stays silent whatever rounds come
// after.
func TestWatchdogReusedOnlyWhenIdle(t *testing.T) {
	g := &gate{}
	l, owner := newLane(t, g)

	require.NoError(t, submit(l, Write).result(t).Err)
	w1 := l.idleDog()
	require.NotNil(t, w1, "a round answered in time leaves its watchdog")
	assert.Nil(t, w1.calls, "an idle watchdog keeps no calls")
	require.NoError(t, submit(l, Write).result(t).Err)
	assert.Same(t, w1, l.idleDog(), "the next round reuses it")

	g.close()
	hung := submit(l, Write)
	require.Eventually(t, func() bool { return hung.silent.Load() == 1 }, 5*time.Second, time.Millisecond)
	assert.Nil(t, l.idleDog(), "the silent round holds the watchdog")
	g.open()
	require.NoError(t, hung.result(t).Err)
	assert.Nil(t, l.idleDog(), "a watchdog that fired is not taken back")
	assert.Equal(t, batchSilent, w1.state.Load())

	time.Sleep(base + 10*time.Millisecond) // the breaker lets a probe through
	for range 3 {
		require.NoError(t, submit(l, Write).result(t).Err)
	}
	w2 := l.idleDog()
	require.NotNil(t, w2)
	assert.NotSame(t, w1, w2, "a new watchdog replaces the one that fired")
	assert.Equal(t, batchSilent, w1.state.Load(), "the fired watchdog is never reset")
	select {
	case <-owner.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("a worker is left")
	}
}
