package redlock

import (
	"math"
	"testing"
	"time"
)

// FuzzDecided checks the vote counting: an attempt is decided as soon as the
// outcome is certain, never both ways, always once every node has voted, and
// a win is always a strict majority.
func FuzzDecided(f *testing.F) {
	f.Add(3, 2, 0)
	f.Add(2, 1, 1)
	f.Add(4, 2, 2)
	f.Add(5, 0, 3)
	f.Fuzz(func(t *testing.T, n, votesFor, votesAgainst int) {
		if n < 1 || n > 1000 || votesFor < 0 || votesAgainst < 0 || votesFor+votesAgainst > n {
			t.Skip()
		}
		done, won := decided(n, votesFor, votesAgainst)
		if won && !done {
			t.Fatalf("decided(%d, %d, %d) = won but not done", n, votesFor, votesAgainst)
		}
		if won && 2*votesFor <= n {
			t.Fatalf("decided(%d, %d, %d) = won without a strict majority", n, votesFor, votesAgainst)
		}
		if done && !won && 2*(n-votesAgainst) > n && n-votesAgainst >= n/2+1 {
			t.Fatalf("decided(%d, %d, %d) = lost while a quorum was still reachable", n, votesFor, votesAgainst)
		}
		if votesFor+votesAgainst == n && !done {
			t.Fatalf("decided(%d, %d, %d) = undecided with every vote in", n, votesFor, votesAgainst)
		}
		if !done && votesFor >= n/2+1 {
			t.Fatalf("decided(%d, %d, %d) = undecided with a quorum for", n, votesFor, votesAgainst)
		}
	})
}

// FuzzValidity checks the drift and validity maths on every ttl and drift
// factor: the drift is round(f*ttl)+2ms, or the whole ttl where that would
// reach it; validateTTL accepts exactly the ttls with a positive validity;
// and the expiration is after the attempt's start.
func FuzzValidity(f *testing.F) {
	f.Add(int64(10000), 0.01)
	f.Add(int64(3), 0.0)
	f.Add(int64(math.MaxInt64/int64(time.Millisecond)), 0.999)
	f.Add(int64(50), 0.01)
	f.Fuzz(func(t *testing.T, ms int64, factor float64) {
		cfg := defaultConfig()
		cfg.driftFactor = factor
		if cfg.validate() != nil {
			return
		}
		if ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return
		}
		ttl := time.Duration(ms) * time.Millisecond
		d := drift(factor, ttl)
		if d < min(2*time.Millisecond, ttl) {
			t.Fatalf("drift(%v, %v) = %v, below 2ms", factor, ttl, d)
		}
		if d > ttl {
			t.Fatalf("drift(%v, %v) = %v, above the ttl", factor, ttl, d)
		}
		// round(f*ms)+2 in exact arithmetic; where that reaches the ttl,
		// drift is the ttl itself.
		if want := math.Round(factor*float64(ms)) + 2; want < float64(ms) && d != time.Duration(want)*time.Millisecond {
			t.Fatalf("drift(%v, %v) = %v, want %vms", factor, ttl, d, want)
		} else if want >= float64(ms) && d != ttl {
			t.Fatalf("drift(%v, %v) = %v, want the ttl (no validity)", factor, ttl, d)
		}
		if err := validateTTL(ttl, &cfg); err == nil {
			if ttl-d <= 0 {
				t.Fatalf("validateTTL(%v) accepted a ttl with validity %v", ttl, ttl-d)
			}
			start := time.Now()
			if exp := start.Add(ttl - d); !exp.After(start) {
				t.Fatalf("expiration %v not after start %v for ttl %v", exp, start, ttl)
			}
		} else if ttl-d > 0 {
			t.Fatalf("validateTTL(%v) refused a ttl with validity %v: %v", ttl, ttl-d, err)
		}
	})
}

// FuzzOptions checks that validation never panics, accepts exactly the
// documented ranges, and names the bad value.
func FuzzOptions(f *testing.F) {
	f.Add(0.01, 10, int64(200e6), int64(100e6), int64(500e6), int64(100e6))
	f.Add(math.NaN(), -1, int64(0), int64(0), int64(0), int64(1))
	f.Add(0.5, 0, int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(time.Millisecond))
	f.Add(1.0, -2, int64(-1), int64(-1), int64(-1), int64(0))
	f.Fuzz(func(t *testing.T, drift float64, retries int, delay, jitter, threshold, timeout int64) {
		base := defaultConfig()
		c, err := with(&base, []Option{
			WithDriftFactor(drift), WithRetryCount(retries), WithRetryDelay(time.Duration(delay)),
			WithRetryJitter(time.Duration(jitter)), WithAutomaticExtensionThreshold(time.Duration(threshold)),
			WithNodeTimeout(time.Duration(timeout)),
		})
		const day = int64(24 * time.Hour)
		ok := drift >= 0 && drift < 1 && retries >= -1 && delay >= 0 && delay <= day && jitter >= 0 && jitter <= day &&
			threshold >= 0 && threshold <= day && timeout >= int64(time.Millisecond) && timeout <= day
		if ok != (err == nil) {
			t.Fatalf("with(drift %v, retries %d, delay %d, jitter %d, threshold %d, timeout %d) = %v, want ok=%v",
				drift, retries, delay, jitter, threshold, timeout, err, ok)
		}
		if err != nil {
			return
		}
		// A valid config never gives a negative retry delay.
		if d := retryDelay(c); d < 0 {
			t.Fatalf("retryDelay = %v", d)
		}
	})
}
