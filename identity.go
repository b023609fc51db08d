package redlock

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// One server votes once. New refuses two clients with the same address,
// but one server has many names (localhost and 127.0.0.1, a DNS alias, a
// proxy in front of it) and many databases, and a server that votes twice
// can make a "majority" of one live server. So a node that is one server
// (a *redis.Client, not a Cluster or a FailoverClient, whose servers change
// under it) asks its server what it is: INFO server's run_id, read in the
// same pipeline as its calls, in every round until the server has answered,
// then once each identityEvery (a restart changes the run_id). The first
// node to claim a run_id votes for that server; another node whose server
// says the same run_id is its twin: its calls vote against at once, unsent,
// with an error that names both nodes, until its server says otherwise.
// Several databases of one server are one server: one crash loses them all.
//
// What it cannot see: a server whose ACL forbids INFO (the question is
// refused, and asked again each identityEvery); and, for up to
// identityEvery after a server restarted, its two names both voting.

// identityEvery is how often a node asks its server's run_id again: a
// server restarted under two names (a new run_id that neither has claimed)
// is recognised at the first call of each node after that long.
const identityEvery = time.Second

// servers is a Redlock's record of which node is which server.
type servers struct {
	mu   sync.Mutex
	byID map[string]*node // run_id: the node that votes for that server
	idOf map[*node]string // each node's server's run_id, as it last said
}

// identified records that nd's server answered with run_id id ("" when it
// refused to say: INFO forbidden by an ACL), and sets or clears nd's twin:
// the node that claimed id first votes for that server, any other is its
// twin. It runs before nd's calls of the round that asked are judged, and
// under the record's lock, so that of two nodes (or two lanes of one node)
// answering at once, one claims and the other sees the claim.
func (s *servers) identified(nd *node, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd.askedAt.Store(time.Now().UnixNano())
	if id == "" {
		return
	}
	if s.byID == nil {
		s.byID, s.idOf = map[string]*node{}, map[*node]string{}
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
		nd.twin.Store(&sameServerError{node: nd, first: owner, id: id})
	}
}

// sameServerError is the vote of a node whose server an earlier node of the
// Redlock already is.
type sameServerError struct {
	node, first *node
	id          string
}

func (e *sameServerError) Error() string {
	return "the same server as node " + strconv.Itoa(e.first.index) + " (" + e.first.addr + ", run_id " + e.id + "), which votes for it: " +
		"a server votes once, so that one server cannot make a majority; give New one client per independent server"
}

// Is makes it match ErrInvalidArgument: the clients given to New are wrong.
func (e *sameServerError) Is(target error) bool { return target == ErrInvalidArgument }

// runID returns the run_id in the reply to INFO server, or "".
func runID(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// identifies reports whether a node with client c asks its server's run_id:
// a plain server (a FailoverClient's server changes at each failover, and a
// Cluster's are many).
func identifies(c redis.UniversalClient) bool {
	cl, ok := c.(*redis.Client)
	return ok && cl.Options().Addr != "FailoverClient"
}
