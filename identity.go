package redlock

import (
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// One server votes once. New refuses two clients with the same address,
// but one server has many names (localhost and 127.0.0.1, a DNS alias, a
// proxy in front of it) and many databases, and a server that votes twice
// can make a "majority" of one live server. So a node that is one server
// (a *redis.Client, not a Cluster or a FailoverClient, whose servers change
// under it) asks its server what it is at first contact: INFO server's
// run_id, read in the same pipeline as its first calls. A node whose server
// an earlier node of the Redlock already is counts once: from then on its
// calls vote against at once, unsent, with an error that names both nodes,
// and the node that said it first keeps voting. (Several databases of one
// server are one server: one crash loses them all.)

// servers is a Redlock's record of which node is which server.
type servers struct {
	mu   sync.Mutex
	byID map[string]*node // run_id: the node that said it first
}

// identified records that nd's server has run_id id. It returns the node
// that is that server already, or nil.
func (s *servers) identified(nd *node, id string) *node {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first, ok := s.byID[id]; ok && first != nd {
		return first
	}
	if s.byID == nil {
		s.byID = map[string]*node{}
	}
	s.byID[id] = nd
	return nil
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
