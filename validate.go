package redlock

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/script"
)

// Validation at the door: what New and every call refuse before anything
// is sent, with an error matching ErrInvalidArgument that names the bad
// value and what to do.

// distinctServers refuses two clients for one server: two *redis.Client
// with the same address (whatever their databases: several databases of
// one server are one server), or two ClusterClients that share a seed
// address. Other names of one server are found at first contact
// (internal/lane's identity.go). That node would vote twice. (A FailoverClient's address is
// resolved through its sentinels at run time, so it is not compared.)
func distinctServers(clients []redis.UniversalClient) error {
	seen := map[string]int{}
	for i, c := range clients {
		var ids []string
		switch c := c.(type) {
		case *redis.Client:
			if o := c.Options(); o.Addr != "FailoverClient" {
				ids = append(ids, o.Addr) // any database: one server votes once
			}
		case *redis.ClusterClient:
			for _, a := range c.Options().Addrs {
				ids = append(ids, "cluster "+a)
			}
		}
		for _, id := range ids {
			if j, ok := seen[id]; ok && j != i {
				return invalid("clients[%d] and clients[%d] talk to the same server (%s), which would vote twice: "+
					"give each independent node once", j, i, id)
			}
			seen[id] = i
		}
	}
	return nil
}

// isNil reports whether c is nil or an interface holding a nil pointer.
func isNil(c any) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// validateTTL refuses a ttl that Redis cannot take or that leaves no validity.
func validateTTL(ttl time.Duration, cfg *config) error {
	switch {
	case ttl <= 0:
		return invalid("ttl %v is not positive: a lock needs a ttl such as 10*time.Second", ttl)
	case ttl < time.Millisecond:
		return invalid("ttl %v is under a millisecond, the least Redis takes: a time.Duration counts nanoseconds (10 is 10ns), "+
			"so give it a unit, such as 10*time.Second", ttl)
	case ttl%time.Millisecond != 0:
		return invalid("ttl %v is not a whole number of milliseconds, which is what Redis takes: round it with ttl.Round(time.Millisecond)", ttl)
	}
	if ttl <= drift(cfg.driftFactor, ttl) {
		return invalid("ttl %v leaves no validity after the clock drift allowance of %v (WithDriftFactor): use a longer ttl",
			ttl, driftAllowance(cfg.driftFactor, ttl))
	}
	return nil
}

// driftAllowance is the clock drift allowance as the docs give it,
// round(f × ttl in ms) + 2ms, for the error that refuses a ttl too short
// for it: drift caps it at the ttl, which would say a 1ms ttl's allowance
// is 1ms. It stops at the largest whole-millisecond Duration rather than
// overflow.
func driftAllowance(f float64, ttl time.Duration) time.Duration {
	const most = math.MaxInt64 / time.Millisecond
	ms := math.Round(f*float64(ttl/time.Millisecond)) + 2
	if ms >= float64(most) {
		return most * time.Millisecond
	}
	return time.Duration(ms) * time.Millisecond
}

// validateResources refuses an empty list, an empty name, a name in the
// fencing counters' namespace, and a duplicate.
func validateResources(resources []string) error {
	if len(resources) == 0 {
		return invalid("no resources to lock")
	}
	for i, res := range resources {
		if res == "" {
			return invalid("resources[%d] is empty", i)
		}
		if strings.HasPrefix(res, script.FencePrefix) {
			return invalid("resources[%d] %q is in the namespace of the fencing counters (%s*): give locks keys of their own", i, res, script.FencePrefix)
		}
		if ns := script.Reserved(res); ns != "" {
			return invalid("resources[%d] %q is in the namespace %s*, which redlock keeps for its own keys: give locks keys of their own", i, res, ns)
		}
		for j := range i {
			if resources[j] == res {
				return invalid("resources[%d] %q duplicates resources[%d]", i, res, j)
			}
		}
	}
	return nil
}

// ready refuses a nil Redlock, one not made by New, and a nil ctx.
func (r *Redlock) ready(ctx context.Context) error {
	if r == nil || r.cfg == nil {
		return invalid("nil or zero Redlock: make one with New")
	}
	if ctx == nil {
		return invalid("nil context: pass context.Background() or a request's context")
	}
	return nil
}

// open is ready for a call that takes something new (a lock, a term, a
// read or a take-back of another's): once the Redlock is closed it refuses
// the call, named by call (and resources, when given), with an error
// matching ErrClosed, before anything is sent. Extend and Release of what
// a caller holds go through owns instead, and are still sent (see Close).
func (r *Redlock) open(ctx context.Context, call string, resources []string) error {
	if err := r.ready(ctx); err != nil {
		return err
	}
	if r.closed.Load() {
		if resources != nil {
			call = fmt.Sprintf("%s %q", call, resources)
		}
		return fmt.Errorf("%w: %s: not sent; after Close only the Extend and Release of locks taken before it are sent", ErrClosed, call)
	}
	return nil
}

// owns refuses a nil Lock, a zero Lock, and a Lock acquired through another
// Redlock.
func (r *Redlock) owns(ctx context.Context, lock *Lock) error {
	if err := r.ready(ctx); err != nil {
		return err
	}
	switch {
	case lock == nil:
		return invalid("nil lock")
	case lock.redlock == nil:
		return invalid("zero Lock: locks come from Acquire or Extend")
	case lock.redlock != r:
		return invalid("the lock was acquired through another Redlock")
	}
	return nil
}
