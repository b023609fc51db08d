package lane

import (
	"strings"
	"sync"
	"time"
)

// One server votes once. A caller refuses two clients with the same
// address, but one server has many names (localhost and 127.0.0.1, a DNS
// alias, a proxy in front of it) and many databases, and a server that
// votes twice can make a "majority" of one live server. So a node that is
// one server (driver.Info's OneServer: not a Cluster or a Sentinel group,
// whose servers change under it) asks its server what it is: INFO server's run_id,
// read in the same pipeline as its calls, in every round until the server
// has answered, then once each IdentityEvery (a restart changes the run_id).
// The first node to claim a run_id is that server's; another node whose
// server says the same run_id is its twin: its Write calls end at once,
// unsent, with a *TwinError, until its server says otherwise.
//
// What it cannot see: a server whose ACL forbids INFO (the question is
// refused, and asked again each IdentityEvery); and, for up to
// IdentityEvery after a server restarted, its two names both answering.

// IdentityEvery is how often a node asks its server's run_id again: a
// server restarted under two names (a new run_id that neither has claimed)
// is recognised at the first call of each node after that long.
const IdentityEvery = time.Second

// Servers is a quorum's record of which node is which server. The zero
// Servers is ready to use.
type Servers struct {
	mu   sync.Mutex
	byID map[string]*Node // run_id: the node that claimed that server
	idOf map[*Node]string // each node's server's run_id, as it last said
}

// identified records that nd's server answered with run_id id ("" when it
// refused to say: INFO forbidden by an ACL), and sets or clears nd's twin:
// the node that claimed id first is that server's, any other is its twin.
// It runs before nd's calls of the round that asked are handed out, and
// under the record's lock, so that of two nodes (or two lanes of one node)
// answering at once, one claims and the other sees the claim.
func (s *Servers) identified(nd *Node, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd.askedAt.Store(time.Now().UnixNano())
	if id == "" {
		return
	}
	if s.byID == nil {
		s.byID, s.idOf = map[string]*Node{}, map[*Node]string{}
	}
	if old, ok := s.idOf[nd]; ok && old != id && s.byID[old] == nd {
		delete(s.byID, old) // restarted: its old run_id is no one's now
	}
	s.idOf[nd] = id
	owner, ok := s.byID[id]
	switch {
	case !ok:
		s.byID[id] = nd
		fallthrough
	case owner == nd:
		nd.twin.Store(nil)
	default:
		nd.twin.Store(&TwinError{Node: nd.index, First: owner.index, FirstAddr: owner.addr, ID: id})
	}
}

// runID returns the run_id in the reply to INFO server, or "".
func runID(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
