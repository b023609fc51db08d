package wake

import (
	"slices"
	"sync"
	"time"
)

// Keeper keeps sets of waiters' places on the nodes: each set (by a key of
// the caller's) has its members and one function that renews them all,
// which a timer calls every period with the members it holds then, while
// any remain. The zero Keeper is ready; Stop ends every set. A renewal in
// flight when its last member leaves may still run.
type Keeper struct {
	mu      sync.Mutex
	stopped bool
	sets    map[any]*kept
}

type kept struct {
	members []any
	timer   *time.Timer
}

// Add makes m a member of set key, which is made when it has none, with
// renew called every period (the first member's renew and period are the
// set's). It reports false when the Keeper is stopped.
func (k *Keeper) Add(key, m any, every time.Duration, renew func(members []any)) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return false
	}
	s := k.sets[key]
	if s == nil {
		if k.sets == nil {
			k.sets = map[any]*kept{}
		}
		s = &kept{}
		k.sets[key] = s
		s.timer = time.AfterFunc(every, func() {
			k.mu.Lock()
			if k.sets[key] != s {
				k.mu.Unlock()
				return
			}
			members := slices.Clone(s.members)
			s.timer.Reset(every)
			k.mu.Unlock()
			renew(members)
		})
	}
	s.members = append(s.members, m)
	return true
}

// Remove takes m out of set key; the set ends with its last member.
func (k *Keeper) Remove(key, m any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.sets[key]
	if s == nil {
		return
	}
	s.members = slices.DeleteFunc(s.members, func(o any) bool { return o == m })
	if len(s.members) == 0 {
		s.timer.Stop()
		delete(k.sets, key)
	}
}

// Sets returns how many sets are kept (for tests).
func (k *Keeper) Sets() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.sets)
}

// Stop ends every set, and Add refuses from then on: a renewal whose timer
// fired before may still be running.
func (k *Keeper) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	for key, s := range k.sets {
		s.timer.Stop()
		delete(k.sets, key)
	}
}
