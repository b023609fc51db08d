package redistest

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fake stands in for a node in the library's unit tests, without Redis: it
// answers every script call with Result (or Err) after Delay, or, while
// Hang is open, not at all. It implements only what the library sends
// scripts through (EvalSha, Eval, Pipelined); a unit test puts it in a
// node's place.
type Fake struct {
	Result any
	Err    error
	Delay  time.Duration
	Hang   chan struct{} // when set, every call blocks until it is closed
}

func (f *Fake) answer(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	if f.Hang != nil {
		<-f.Hang
	} else if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	if f.Err != nil {
		cmd.SetErr(f.Err)
	} else {
		cmd.SetVal(f.Result)
	}
	return cmd
}

// EvalSha answers as the fake does.
func (f *Fake) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.answer(ctx)
}

// Eval answers as the fake does.
func (f *Fake) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.answer(ctx)
}

// Pipelined answers each command of a batch as the fake answers single
// calls: the commands are queued on a pipeline of a client that never
// connects, and answered here.
func (f *Fake) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	pipe := c.Pipeline()
	if err := fn(pipe); err != nil {
		return nil, err
	}
	cmds := pipe.(interface{ Cmds() []redis.Cmder }).Cmds()
	for _, cmd := range cmds {
		answer := f.answer(ctx)
		if c, ok := cmd.(*redis.Cmd); ok {
			c.SetVal(answer.Val())
			c.SetErr(answer.Err())
		}
	}
	return cmds, nil
}
