package redlock_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// Every combination of options that would mean nothing, or switch
// something off without a word, is refused with ErrInvalidArgument naming
// the options as the caller gave them, before anything is sent.
func TestMeaninglessOptionsAreRefused(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3)
	ctx := context.Background()
	hand := redlock.WithHandOver(8, time.Second)
	acquire := func(opts ...redlock.Option) func() error {
		return func() error { _, err := f.rl.Acquire(ctx, []string{"m"}, time.Second, opts...); return err }
	}
	for name, c := range map[string]struct {
		call func() error
		says string
	}{
		"hand-over with permits":        {acquire(hand, redlock.WithPermits(2)), "WithHandOver(8, 1s) with WithPermits(2)"},
		"hand-over with shared":         {acquire(redlock.WithShared(true), hand), "WithHandOver(8, 1s) with WithShared(true)"},
		"hand-over with the fair queue": {acquire(hand, redlock.WithFairQueue(true)), "WithHandOver(8, 1s) with WithFairQueue(true)"},
		"hand-over without wake":        {acquire(hand, redlock.WithWakeOnRelease(false)), "WithHandOver(8, 1s) with WithWakeOnRelease(false)"},
		"fair queue without wake": {acquire(redlock.WithFairQueue(true), redlock.WithWakeOnRelease(false)),
			"WithFairQueue(true) with WithWakeOnRelease(false)"},
		"fencing with shared":     {acquire(redlock.WithFencing(true), redlock.WithShared(true)), "WithFencing(true) with WithShared(true)"},
		"fencing with permits":    {acquire(redlock.WithFencing(true), redlock.WithPermits(3)), "WithFencing(true) with WithPermits(3)"},
		"fair queue with permits": {acquire(redlock.WithFairQueue(true), redlock.WithPermits(3)), "WithFairQueue(true) with WithPermits(3)"},
		"threshold to Acquire": {acquire(redlock.WithAutomaticExtensionThreshold(time.Second)),
			"WithAutomaticExtensionThreshold given to Acquire"},
		"New: hand-over without wake": {func() error {
			_, err := redlock.New(f.Clients, hand, redlock.WithWakeOnRelease(false))
			return err
		}, "WithHandOver(8, 1s) with WithWakeOnRelease(false)"},
		"Campaign: shared": {func() error {
			_, err := f.rl.Election("m").Campaign(ctx, "a", time.Second, redlock.WithShared(true))
			return err
		}, "WithShared(true) for a campaign"},
		"Campaign: permits": {func() error {
			_, err := f.rl.Election("m").Campaign(ctx, "a", time.Second, redlock.WithPermits(2))
			return err
		}, "WithPermits(2) for a campaign"},
		"Using: threshold is fine, fair queue without wake is not": {func() error {
			return f.rl.Using(ctx, []string{"m"}, time.Second, func(context.Context) error { return nil },
				redlock.WithAutomaticExtensionThreshold(200*time.Millisecond), redlock.WithFairQueue(true), redlock.WithWakeOnRelease(false))
		}, "WithFairQueue(true) with WithWakeOnRelease(false)"},
	} {
		err := c.call()
		if assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name) {
			assert.Contains(t, err.Error(), c.says, name)
		}
	}
	assert.Zero(t, f.DBSize(t, 0), "nothing was sent")

	// A kind that New made the default is named as such, with the option
	// that overrides it (a probe found the message naming an option the
	// campaign was not given).
	fairRL, err := redlock.New(f.Clients, redlock.WithFairQueue(true))
	require.NoError(t, err)
	defer fairRL.Close()
	_, err = fairRL.Election("m").Campaign(ctx, "a", time.Second)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "or New's default")
	assert.Contains(t, err.Error(), "give the campaign WithFairQueue(false)")
	term, err := fairRL.Election("m").Campaign(ctx, "a", time.Second, redlock.WithFairQueue(false))
	require.NoError(t, err, "the override campaigns")
	require.NoError(t, term.Resign(ctx))

	// What is meaningful stays allowed: New's hand-over default with a
	// semaphore's Acquire; a Release that turns hand-over off.
	rl, err := redlock.New(f.Clients, hand)
	require.NoError(t, err)
	defer rl.Close()
	l, err := rl.Acquire(ctx, []string{"m"}, time.Second, redlock.WithPermits(2))
	require.NoError(t, err)
	_, err = l.Release(ctx, redlock.WithHandOver(0, 0))
	require.NoError(t, err)
}

// A lock-shaping option given to Extend or Release does not compile: they
// keep the lock's own. A []Option of both kinds still goes to New, Acquire
// and Using.
func TestLockOptionsDoNotCompileOnExtendOrRelease(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds snippets with the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	build := func(body string) string {
		dir, err := os.MkdirTemp(".", "_compilefail") // in the module, ignored by ./...
		require.NoError(t, err)
		defer os.RemoveAll(dir)
		src := "package main\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\t\"github.com/go-redlock/redlock\"\n)\n\n" +
			"var _ = time.Second\n\nfunc main() {\n\tctx := context.Background()\n\tvar lock *redlock.Lock\n\tvar rl *redlock.Redlock\n\t_, _, _ = ctx, lock, rl\n" + body + "\n}\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
		out, _ := exec.Command(gobin, "build", "-o", os.DevNull, "./"+filepath.Base(dir)).CombinedOutput()
		return string(out)
	}
	for snippet, want := range map[string]string{
		"\t_, _ = lock.Release(ctx, redlock.WithPermits(2))":                 "cannot use redlock.WithPermits(2)",
		"\t_, _ = lock.Extend(ctx, time.Second, redlock.WithFencing(true))":  "cannot use redlock.WithFencing(true)",
		"\t_, _ = rl.Release(ctx, lock, redlock.WithShared(true))":           "cannot use redlock.WithShared(true)",
		"\t_, _ = lock.Extend(ctx, time.Second, redlock.WithHandOver(0, 0))": "cannot use redlock.WithHandOver(0, 0)",
	} {
		out := build(snippet)
		assert.Contains(t, out, want, "%s:\n%s", snippet, out)
	}
	ok := build(`	opts := []redlock.Option{redlock.WithFencing(true), redlock.WithRetryCount(3), redlock.WithHandOver(4, time.Second)}
	_, _ = redlock.New(nil, opts...)
	_, _ = rl.Acquire(ctx, []string{"a"}, time.Second, opts...)
	_ = rl.Using(ctx, []string{"a"}, time.Second, func(context.Context) error { return nil }, opts...)
	_, _ = lock.Extend(ctx, time.Second, redlock.WithRetryCount(3), redlock.WithNodeTimeout(time.Second))
	_, _ = lock.Release(ctx, redlock.WithHandOver(0, 0), redlock.WithObserver(nil))`)
	assert.Empty(t, strings.TrimSpace(ok), "a []Option of both kinds, and call options on Extend and Release, compile")
}
