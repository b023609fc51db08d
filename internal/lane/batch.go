package lane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// evalBy is how a round sends its scripts.
type evalBy uint8

const (
	bySHA      evalBy = iota // EVALSHA: the script's hash only
	withSource               // EVAL: the script itself, which the node then caches
)

// Scripter is the part of a client that sends scripts, alone or pipelined:
// all a lane calls.
type Scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// evaler runs one script: a client, or a pipeline it queues on.
type evaler interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
}

// Ack is what a write must reach before its answer counts: a WAIT (or
// WAITAOF) ends the batch, and each call with an Ack gets the count.
type Ack struct {
	Replicas int           // replicas that must acknowledge
	Local    int           // WAITAOF: 1 when the primary's own AOF must have it
	AOF      bool          // WAITAOF instead of WAIT
	Timeout  time.Duration // how long the node waits for them
}

// strictest returns the Ack that covers every call of a batch that has one
// (the most replicas, the longest timeout), or nil when none has.
func strictest(calls []*Call) *Ack {
	var out *Ack
	for _, c := range calls {
		a := c.Ack
		if a == nil {
			continue
		}
		if out == nil {
			cp := *a
			out = &cp
			continue
		}
		out.Replicas, out.Local, out.Timeout = max(out.Replicas, a.Replicas), max(out.Local, a.Local), max(out.Timeout, a.Timeout)
		out.AOF = out.AOF || a.AOF
	}
	return out
}

// send queues the WAIT (or WAITAOF) on pipe. (go-redis's Pipeliner leaves
// out the blocking commands; Do sends them all the same.)
func (a *Ack) send(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	ms := a.Timeout.Milliseconds()
	if a.AOF {
		return pipe.Do(ctx, "WAITAOF", a.Local, a.Replicas, ms)
	}
	return pipe.Do(ctx, "WAIT", a.Replicas, ms)
}

// readAcks gives each call with an Ack whose script answered the WAIT's
// count (wait's answer).
func readAcks(calls []*Call, wait *redis.Cmd) {
	replicas, local := -1, -1
	res, err := wait.Result()
	if err == nil {
		switch v := res.(type) {
		case int64:
			replicas = int(v)
		case []any:
			if len(v) == 2 {
				l, ok1 := v[0].(int64)
				r, ok2 := v[1].(int64)
				if ok1 && ok2 {
					local, replicas = int(l), int(r)
				}
			}
		}
		if replicas < 0 {
			err = &UnexpectedError{res}
		}
	}
	for _, c := range calls {
		if c.Ack == nil || c.res.Err != nil {
			continue // -1: the script itself failed
		}
		c.res.Acks, c.res.Local, c.res.AckErr = replicas, local, err
	}
}

// UnsupportedError is a node's refusal of a command that its server's
// version does not have (WAITAOF before Redis 7.2), with the server's name
// and version as it then said (INFO server).
type UnsupportedError struct {
	Command string // "WAIT" or "WAITAOF"
	Server  string // "Redis 6.2.9", "Valkey 8.0.1"; "" when the server did not say
	// Disabled: the server's version has the command, so it was renamed
	// away (rename-command). Every server has WAIT; WAITAOF came with
	// Redis 7.2, and every Valkey has it.
	Disabled bool
	Err      error // the node's reply
}

func (e *UnsupportedError) Error() string { return e.Err.Error() }
func (e *UnsupportedError) Unwrap() error { return e.Err }

// explainUnsupported turns the ack errors of calls that say the server
// does not know command into an *UnsupportedError naming the server's
// version, which it asks c once, waiting up to timeout (the node timeout):
// a round trip more, on a call the node refused, which no retry can change.
func explainUnsupported(c Scripter, calls []*Call, command string, timeout time.Duration) {
	var server string
	asked := false
	for _, p := range calls {
		if p.res.AckErr == nil || !unknownCommand(p.res.AckErr, command) {
			continue
		}
		if !asked {
			asked = true
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			var info *redis.StringCmd
			_, _ = c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				info = pipe.Info(ctx, "server")
				return nil
			})
			if v, err := info.Result(); err == nil {
				server = serverOf(v)
			}
			cancel()
		}
		p.res.AckErr = &UnsupportedError{Command: command, Server: server, Disabled: command == "WAIT" || has72(server), Err: p.res.AckErr}
	}
}

// has72 reports whether server (as serverOf says it) is Valkey, or Redis
// 7.2 or later.
func has72(server string) bool {
	if strings.HasPrefix(server, "Valkey ") {
		return true
	}
	v, ok := strings.CutPrefix(server, "Redis ")
	if !ok {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 7 || major == 7 && minor >= 2
}

// unknownCommand reports whether err is a server's "unknown command" reply
// about command: 'WAITAOF' since Redis 7.0, `WAITAOF` before.
func unknownCommand(err error, command string) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Error())
	c := strings.ToLower(command)
	return strings.HasPrefix(msg, "err unknown command") &&
		(strings.Contains(msg, "'"+c+"'") || strings.Contains(msg, "`"+c+"`"))
}

// serverOf returns the server's name and version in a reply to INFO
// server: "Valkey 8.0.1" (whose redis_version says 7.2.4), "Redis 6.2.9",
// or "" when it says neither.
func serverOf(info string) string {
	var name, redisV, valkeyV string
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "server_name:"); ok {
			name = v
		} else if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			valkeyV = v
		} else if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			redisV = v
		}
	}
	switch {
	case valkeyV != "":
		return "Valkey " + valkeyV
	case name != "" && name != "redis" && redisV != "":
		return name + " " + redisV
	case redisV != "":
		return "Redis " + redisV
	}
	return ""
}

// UnexpectedError is an answer to WAIT that is not a count.
type UnexpectedError struct{ Reply any }

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("redlock: unexpected result of type %T returned from redis", e.Reply)
}

// via returns what calls are sent through: the node's client, or, for calls
// that wait for replicas on a Cluster, the shard primary's own client (WAIT
// must follow the script on the same connection, and go-redis does not send
// WAIT in a Cluster pipeline).
func (l *Lane) via(calls []*Call) Scripter {
	nd := l.node
	if nd.cluster == nil || nd.scripts != Scripter(nd.cluster) {
		return nd.scripts
	}
	for _, c := range calls {
		if c.Ack != nil {
			if m, err := nd.cluster.MasterForKey(context.Background(), c.Keys[0]); err == nil {
				return m
			}
			break
		}
	}
	return nd.scripts
}

// runBatch runs calls in one round trip: alone when there is one, else in
// one pipeline; each with EVALSHA, or with EVAL (which caches the script on
// the node) when its src is set (see Lane.choose). A call whose script the node lacks gets the NOSCRIPT
// error, for send to run again withSource. When a call has an Ack, the
// pipeline ends with WAIT (or WAITAOF), which counts the replicas that took
// every write before it on the connection.
//
// With ask, the pipeline starts with INFO server, and runBatch returns the
// server's run_id (see identity.go; "" when INFO was refused, an ACL that
// forbids it), and whether the server answered the question.
func runBatch(c Scripter, calls []*Call, ask bool, timeout time.Duration) (id string, answered bool) {
	ctx := context.Background()
	eval := func(s evaler, p *Call) *redis.Cmd {
		if p.src {
			return s.Eval(ctx, p.Src, p.Keys, p.Args...)
		}
		return s.EvalSha(ctx, p.Hash, p.Keys, p.Args...)
	}
	ack := strictest(calls)
	if len(calls) == 1 && ack == nil && !ask {
		p := calls[0]
		res, err := eval(c, p).Result()
		p.res = Result{Reply: res, Err: err, Acks: -1, Local: -1}
		return "", false
	}
	cmds := make([]*redis.Cmd, len(calls))
	var wait *redis.Cmd
	var info *redis.StringCmd
	_, perr := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if ask {
			info = pipe.Info(ctx, "server")
		}
		for i, p := range calls {
			cmds[i] = eval(pipe, p)
		}
		if ack != nil {
			wait = ack.send(ctx, pipe)
		}
		return nil
	})
	for i, p := range calls {
		res, err := cmds[i].Result()
		if res == nil && err == nil && perr != nil {
			// Never answered: the pipeline failed before it (a wrong
			// password refused as the connection was set up), and go-redis
			// gave the error to the pipeline only. A script always answers
			// something.
			err = perr
		}
		p.res = Result{Reply: res, Err: err, Acks: -1, Local: -1}
	}
	if ack != nil {
		readAcks(calls, wait)
		cmd := "WAIT"
		if ack.AOF {
			cmd = "WAITAOF"
		}
		explainUnsupported(c, calls, cmd, timeout)
	}
	if info != nil {
		v, err := info.Result()
		return runID(v), isReply(err)
	}
	return "", false
}

// isReply reports whether err is nil or the node's own answer (an error
// reply); not a network error or a timeout.
func isReply(err error) bool {
	if err == nil {
		return true
	}
	var re redis.Error
	return errors.As(err, &re) && !IsTimeout(err)
}

// undialed reports whether err says that the call never reached the node:
// its connection could not be made (refused, unresolvable: a dial error).
func undialed(err error) bool {
	if err == nil {
		return false
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial" && !oe.Timeout()
}

// IsTimeout reports whether err says that the node did not answer in time:
// a deadline noticed by the client, or the client's own read or write
// timeout.
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
