package lane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/go-redlock/redlock/driver"
	"github.com/go-redlock/redlock/internal/slot"
)

// evalBy is how a round sends its scripts.
type evalBy uint8

const (
	bySHA      evalBy = iota // EVALSHA: the script's hash only
	withSource               // EVAL: the script itself, which the node then caches
)

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

// cmd returns the WAIT (or WAITAOF), routed with key.
func (a *Ack) cmd(key string) *driver.Cmd {
	ms := a.Timeout.Milliseconds()
	if a.AOF {
		return &driver.Cmd{Args: []any{"waitaof", a.Local, a.Replicas, ms}, Key: key}
	}
	return &driver.Cmd{Args: []any{"wait", a.Replicas, ms}, Key: key}
}

// readAcks gives each call with an Ack whose script answered the WAIT's
// count (wait's answer).
func readAcks(calls []*Call, wait *driver.Cmd) {
	replicas, local := -1, -1
	res, err := wait.Reply, wait.Err
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
			err = &UnexpectedAckError{res}
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
func explainUnsupported(c driver.Node, calls []*Call, command string, timeout time.Duration) {
	var server string
	asked := false
	for _, p := range calls {
		if p.res.AckErr == nil || !unknownCommand(p.res.AckErr, command) {
			continue
		}
		if !asked {
			asked = true
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			info := &driver.Cmd{Args: []any{"info", "server"}}
			c.Do(ctx, []*driver.Cmd{info})
			if v, ok := info.Reply.(string); ok && info.Err == nil {
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
	var re driver.Error
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

// UnexpectedAckError is an answer to WAIT that is not a count.
type UnexpectedAckError struct{ Reply any }

func (e *UnexpectedAckError) Error() string {
	return fmt.Sprintf("redlock: unexpected answer to WAIT, of type %T (a count was expected)", e.Reply)
}

// The commands' names as arguments, boxed once.
var (
	evalSHAName any = "evalsha"
	evalName    any = "eval"
)

// command returns the arguments of p's EVALSHA, or of its EVAL (with the
// script) when p.src: p.Cmd when it has it and goes by hash.
func (p *Call) command() []any {
	if !p.src && p.Cmd != nil {
		return p.Cmd
	}
	args := make([]any, 3+len(p.Keys)+len(p.Args))
	if p.src {
		args[0], args[1] = evalName, p.Src
	} else {
		args[0], args[1] = evalSHAName, p.Hash
	}
	args[2] = len(p.Keys)
	if p.Cmd != nil {
		copy(args[3:], p.Cmd[3:]) // the keys and arguments, boxed already
		return args
	}
	for i, k := range p.Keys {
		args[3+i] = k
	}
	copy(args[3+len(p.Keys):], p.Args)
	return args
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
//
// Calls with the same Many whose keys no other call of the batch has go
// as one call of it (see manyCalls), when their round lets them
// (Call.merge).
func (l *Lane) runBatch(c driver.Node, calls []*Call, ask bool, timeout time.Duration) (id string, answered bool) {
	ack := strictest(calls)
	key := "" // routes the INFO and the WAIT on a Cluster
	if len(calls[0].Keys) > 0 {
		key = calls[0].Keys[0]
	}
	n := len(calls)
	if ask {
		n++
	}
	if ack != nil {
		n++
	}
	// Each call's command is its own (Call.cmd): a call is in one batch
	// at a time, and its worker is done with it when Do returns.
	var cmds []*driver.Cmd
	if n == 1 {
		p := calls[0]
		p.one[0] = &p.cmd
		cmds = p.one[:0] // a call alone: no slice to make
	} else {
		cmds = make([]*driver.Cmd, 0, n)
	}
	var info *driver.Cmd
	if ask {
		info = &driver.Cmd{Args: []any{"info", "server"}, Key: key}
		cmds = append(cmds, info)
	}
	var many []*manyCall
	lead := manyCalls(calls, l.node.isCluster)
	for _, p := range calls {
		if m := lead[p]; m != nil && len(m.calls) > 1 {
			m.cmd = driver.Cmd{Args: m.command(l.manyBy(p.Many)), Key: p.Keys[0]}
			many = append(many, m)
			cmds = append(cmds, &m.cmd)
			continue
		}
		if p.merged {
			continue // in the Many call of a call before it
		}
		p.cmd = driver.Cmd{Args: p.command()}
		if len(p.Keys) > 0 {
			p.cmd.Key = p.Keys[0]
		}
		cmds = append(cmds, &p.cmd)
	}
	var wait *driver.Cmd
	if ack != nil {
		wait = ack.cmd(key)
		cmds = append(cmds, wait)
	}
	c.Do(context.Background(), cmds)
	for _, p := range calls {
		if !p.merged {
			p.res = Result{Reply: p.cmd.Reply, Err: p.cmd.Err, Acks: -1, Local: -1}
		}
	}
	for _, m := range many {
		m.split()
	}
	if ack != nil {
		readAcks(calls, wait)
		cmd := "WAIT"
		if ack.AOF {
			cmd = "WAITAOF"
		}
		explainUnsupported(c, calls, cmd, timeout)
	}
	if ask {
		v, _ := info.Reply.(string)
		return runID(v), isReply(info.Err)
	}
	return "", false
}

// manyCall is calls that go as one call of their Many script.
type manyCall struct {
	calls []*Call
	keys  int // theirs, in all
	cmd   driver.Cmd
}

// manyCalls groups the calls of a batch that go as one call of their Many
// script, by the first of each group: the calls with a Many, their round's
// leave (merge) and no Ack, whose keys no other call of the batch has (so
// that running one before the calls that came before it changes nothing),
// per Many and, on a Cluster, per hash slot; at most maxManyCalls calls and
// maxManyKeys keys a group. Nil when fewer than two could go together.
func manyCalls(calls []*Call, cluster bool) map[*Call]*manyCall {
	n := 0
	for _, c := range calls {
		if c.Many != nil && c.merge && c.Ack == nil && len(c.Keys) > 0 {
			n++
		}
	}
	if n < 2 {
		return nil
	}
	uses := make(map[string]int, len(calls))
	for _, c := range calls {
		for _, k := range c.Keys {
			uses[k]++
		}
	}
	type bucket struct {
		many *Many
		slot uint16
	}
	open := map[bucket]*manyCall{}
	lead := make(map[*Call]*manyCall, 4)
	for _, c := range calls {
		if c.Many == nil || !c.merge || c.Ack != nil || len(c.Keys) == 0 {
			continue
		}
		shared := false
		for _, k := range c.Keys {
			if uses[k] > 1 {
				shared = true
				break
			}
		}
		if shared {
			continue
		}
		b := bucket{many: c.Many}
		if cluster {
			b.slot = slot.Of(c.Keys[0])
		}
		m := open[b]
		if m == nil || len(m.calls) == maxManyCalls || m.keys+len(c.Keys) > maxManyKeys {
			m = &manyCall{}
			open[b] = m
			lead[c] = m
		}
		m.calls = append(m.calls, c)
		m.keys += len(c.Keys)
	}
	return lead
}

// command returns the arguments of m's call of its Many script: by its
// hash, or with its source.
func (m *manyCall) command(how evalBy) []any {
	keys, args := 0, 0
	for _, c := range m.calls {
		keys += len(c.Keys)
		args += 1 + len(c.Args)
	}
	cmd := make([]any, 3, 3+keys+args)
	mn := m.calls[0].Many
	if how == withSource {
		cmd[0], cmd[1] = evalName, mn.Src
	} else {
		cmd[0], cmd[1] = evalSHAName, mn.Hash
	}
	cmd[2] = keys
	for _, c := range m.calls {
		c.merged = true
		for _, k := range c.Keys {
			cmd = append(cmd, k)
		}
	}
	for _, c := range m.calls {
		cmd = append(cmd, len(c.Keys))
		cmd = append(cmd, c.Args...)
	}
	return cmd
}

// split gives each call its part of the Many call's answer: its reply, or
// the error its script would have raised; the Many call's own error, which
// it raised before it wrote anything; or, for an answer of another shape,
// the whole answer, which the call's reader refuses. A call that the Many
// call did not run because its script is not cached or the node refused
// it (Many.Alone, or the whole call: see refusedMany) goes again alone
// (manyErr: see resends); one that met another error (BUSY, LOADING, a
// network error) has it as its own.
func (m *manyCall) split() {
	replies, ok := m.cmd.Reply.([]any)
	ok = ok && len(replies) == len(m.calls)
	alone := m.calls[0].Many.Alone
	for k, c := range m.calls {
		r := Result{Acks: -1, Local: -1}
		switch {
		case m.cmd.Err != nil:
			r.Err, r.manyFailed = m.cmd.Err, true
			r.manyErr = hasPrefix(r.Err, "NOSCRIPT") || refusedMany(r.Err)
		case !ok:
			r.Reply = m.cmd.Reply
		default:
			e, isErr := replies[k].(string)
			switch {
			case !isErr:
				r.Reply = replies[k]
			case alone != "" && strings.HasPrefix(e, alone):
				r.Err, r.manyErr = driver.ReplyError(e[len(alone):]), true
			default:
				r.Err = driver.ReplyError(e)
			}
		}
		c.res = r
	}
}

// refusedMany reports whether err is a node's refusal of a command that a
// Many script calls and its calls' own scripts may not (an ACL without it,
// a command renamed away): its calls then go one by one.
func refusedMany(err error) bool {
	var re driver.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, s := range []string{"NOPERM", "ACL", "can't run", "no permissions", "nknown command", "nknown Redis command"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// run runs calls through the node's conn (runBatch). On a Cluster of
// another client than go-redis (one lane for the whole Cluster), a batch
// that waits for replicas goes as one round per slot, each ending with its
// WAIT at that slot's primary, one after the other: WAIT counts the writes
// before it on its connection, and the client routes it by its key's slot.
// (Calls on one key share a slot, so none overtakes another on its key.)
func (l *Lane) run(calls []*Call, ask bool) (id string, answered bool) {
	nd := l.node
	if !nd.isCluster || nd.cluster != nil || strictest(calls) == nil {
		return l.runBatch(nd.conn, calls, ask, l.base)
	}
	var order []uint16
	bySlot := map[uint16][]*Call{}
	for _, c := range calls {
		var s uint16
		if len(c.Keys) > 0 {
			s = slot.Of(c.Keys[0])
		}
		if _, ok := bySlot[s]; !ok {
			order = append(order, s)
		}
		bySlot[s] = append(bySlot[s], c)
	}
	for _, s := range order {
		l.runBatch(nd.conn, bySlot[s], false, l.base)
	}
	return "", false
}

// isReply reports whether err is nil or the node's own answer (an error
// reply); not a network error or a timeout.
func isReply(err error) bool {
	if err == nil {
		return true
	}
	var re driver.Error
	return errors.As(err, &re) && !IsTimeout(err)
}

// undialed reports whether err says that the call never reached the node:
// its connection could not be made (refused, unresolvable: a dial error).
func undialed(err error) bool {
	if err == nil {
		return false
	}
	var oe *net.OpError
	// A refused connect: a dial's error, or what a client (go-redis
	// unwraps it, or Open's dialer hands it on as the first write's error)
	// keeps of it.
	return errors.As(err, &oe) && oe.Op == "dial" && !oe.Timeout() || errors.Is(err, syscall.ECONNREFUSED)
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

// hasPrefix reports whether err is an error reply that starts with prefix
// (after "ERR ", as go-redis's HasErrorPrefix).
func hasPrefix(err error, prefix string) bool {
	var re driver.Error
	if !errors.As(err, &re) {
		return false
	}
	return strings.HasPrefix(strings.TrimPrefix(re.Error(), "ERR "), prefix)
}
