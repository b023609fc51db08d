package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
)

// TestElectionInspect: an election is inspected by its name, with no key
// built by hand; its leader's campaign id and its process's identity are
// each named for what they are (issue 44).
func TestElectionInspect(t *testing.T) {
	t.Parallel()
	f := newNodes(t, 3, redlock.WithIdentity("web-7"))
	ctx := context.Background()
	el := f.rl.Election("jobs")
	in, err := el.Inspect(ctx)
	require.NoError(t, err)
	assert.Equal(t, redlock.Free, in.State)
	term, err := el.Campaign(ctx, "pod-a", 10*time.Second)
	require.NoError(t, err)
	defer func() { _ = term.Resign(ctx) }()
	require.Eventually(t, func() bool {
		in, err = el.Inspect(ctx)
		return err == nil && in.Term == term.Number() && len(in.Holders) == 1 && in.Holders[0].Nodes == 3
	}, 5*time.Second, 5*time.Millisecond, "the term recorded on every node")
	assert.Equal(t, redlock.Held, in.State)
	assert.Equal(t, "pod-a", in.Leader, "the campaign's id")
	assert.Equal(t, "web-7", in.Holders[0].Identity, "the process's identity")
	assert.Equal(t, "redlock:election:jobs", in.Resource)

	var zero *redlock.Election
	_, err = zero.Inspect(ctx)
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
}
