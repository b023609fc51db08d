package redlock

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// driftAllowance is drift's formula, round(f × ttl in ms) + 2ms, without
// its cap at the ttl; at the largest whole-millisecond ttl it stops there
// rather than overflow.
func TestDriftAllowance(t *testing.T) {
	t.Parallel()
	const most = math.MaxInt64 / time.Millisecond * time.Millisecond
	for _, tc := range []struct {
		f    float64
		ttl  time.Duration
		want time.Duration
	}{
		{0.01, time.Millisecond, 2 * time.Millisecond},
		{0, time.Millisecond, 2 * time.Millisecond},
		{0.01, 2 * time.Millisecond, 2 * time.Millisecond},
		{0.99, 100 * time.Millisecond, 101 * time.Millisecond},
		{0.5, 3 * time.Millisecond, 4 * time.Millisecond}, // round(1.5)+2
		{0.01, 10000 * time.Millisecond, 102 * time.Millisecond},
		{0.9999999999999999, most, most}, // no overflow
	} {
		assert.Equal(t, tc.want, driftAllowance(tc.f, tc.ttl), "driftAllowance(%v, %v)", tc.f, tc.ttl)
	}
	// Below the cap it is drift.
	for _, f := range []float64{0, 0.01, 0.1, 0.5, 0.99} {
		for ms := time.Duration(1); ms <= 1000; ms++ {
			ttl := ms * time.Millisecond
			if d := drift(f, ttl); d < ttl {
				assert.Equal(t, d, driftAllowance(f, ttl), "driftAllowance(%v, %v)", f, ttl)
			}
		}
	}
}
