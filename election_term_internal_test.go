package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The cancel point's margin: a quarter of the threshold, 100ms at most, so
// that an extension keeps three quarters of the threshold to get through.
func TestCancelPointMargin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		threshold, want time.Duration
	}{
		{500 * time.Millisecond, 100 * time.Millisecond}, // the default
		{400 * time.Millisecond, 100 * time.Millisecond},
		{300 * time.Millisecond, 75 * time.Millisecond},
		{100 * time.Millisecond, 25 * time.Millisecond},
		{time.Millisecond, 250 * time.Microsecond},
		{0, 0},
		{24 * time.Hour, 100 * time.Millisecond},
	} {
		cfg := defaultConfig()
		cfg.extensionThreshold = c.threshold
		assert.Equal(t, c.want, margin(&cfg), "margin with threshold %v", c.threshold)
	}
}

// The error of a lock not extended by its cancel point says so, with the
// last failure (its "extend [...]" said once), and wraps it.
func TestUnextendedErrorText(t *testing.T) {
	t.Parallel()
	last := &ExecutionError{Op: OpExtend, Resources: []string{"a"}, reason: "no quorum: 1 of 3 nodes voted for, 2 needed"}
	for _, c := range []struct {
		err  *unextendedError
		want string
	}{
		{&unextendedError{resources: []string{"a"}, margin: 20 * time.Millisecond, last: last},
			`redlock: extend ["a"]: not extended 20ms before the end of its validity: no quorum: 1 of 3 nodes voted for, 2 needed`},
		{&unextendedError{resources: []string{"a"}, margin: 20 * time.Millisecond, inFlight: true},
			`redlock: extend ["a"]: not extended 20ms before the end of its validity (an extension was still on its way)`},
		{&unextendedError{resources: []string{"a"}, margin: 20 * time.Millisecond, last: last, inFlight: true},
			`redlock: extend ["a"]: not extended 20ms before the end of its validity (an extension was still on its way; the one before failed: no quorum: 1 of 3 nodes voted for, 2 needed)`},
		{&unextendedError{resources: []string{"a"}, margin: 5 * time.Millisecond},
			`redlock: extend ["a"]: not extended 5ms before the end of its validity`},
	} {
		assert.Equal(t, c.want, c.err.Error())
		if c.err.last != nil {
			assert.ErrorIs(t, c.err, c.err.last)
		}
		wrapped := &extensionError{err: c.err}
		assert.ErrorIs(t, wrapped, ErrExtensionFailed)
		assert.Equal(t, 1, countPrefix(wrapped.Error()), "one redlock: prefix in %q", wrapped.Error())
	}
	assert.NotErrorIs(t, &unextendedError{resources: []string{"a"}}, ErrLockExpired, "the validity is not over at the cancel point")
	assert.ErrorIs(t, &unextendedError{last: &ExecutionError{sentinel: ErrLockExpired}}, ErrLockExpired, "wraps the last failure")
}

func countPrefix(s string) int {
	n := 0
	for i := 0; i+len("redlock: ") <= len(s); i++ {
		if s[i:i+len("redlock: ")] == "redlock: " {
			n++
		}
	}
	return n
}

// BenchmarkCancelPointLateness measures what the cancel point's margin covers: how late a
// goroutine waiting on a context sees it end when a timer's goroutine
// cancels it at a set time, the extender's path at its cancel point, with
// 16 such timers at a time (a process with many locks). Its metrics are
// the lateness's percentiles and maximum; run it idle and beside a load:
//
//	go test -run '^$' -bench CancelPointLateness -benchtime 2000x .
//	for i in 1 2; do (while :; do :; done) & done   # the load; kill them after
func BenchmarkCancelPointLateness(b *testing.B) {
	const par = 16
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for range b.N {
				at := time.Now().Add(time.Duration(1000+rand.IntN(9000)) * time.Microsecond)
				ctx, cancel := context.WithCancelCause(context.Background())
				seen := make(chan time.Time, 1)
				go func() { <-ctx.Done(); seen <- time.Now() }()
				end := time.NewTimer(time.Until(at))
				<-end.C
				cancel(errors.New("lost"))
				mine = append(mine, (<-seen).Sub(at))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / 1e3 }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(0.999), "p99.9-µs")
	b.ReportMetric(float64(all[len(all)-1])/1e3, "max-µs")
	b.ReportMetric(0, "ns/op")
}
