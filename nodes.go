package redlock

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock/internal/dial"
)

// ParseNodes parses a node list, as [Open] and the redlock command take it:
// entries separated by commas, each a host:port, a redis://, rediss:// or
// unix:// URL (as redis.ParseURL reads it). It returns one *redis.Options
// per entry, with MaxRetries -1, DialerRetries 1 and ContextTimeoutEnabled
// where the entry does not set them. Its errors match [ErrInvalidArgument],
// quote the entry with its password masked and say how to write it (an
// empty entry, a comma in a password: %2C, a bad port or URL, one server
// twice). A Cluster or Sentinel group is one node of the caller's making.
func ParseNodes(list string) ([]*redis.Options, error) {
	if strings.TrimSpace(list) == "" {
		return nil, invalid("the node list is empty: give host:port entries separated by commas, such as " +
			"10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379 (an environment variable that is not set gives an empty list)")
	}
	m := newMasker(list)
	// Credentials that the split at commas cut, or that are not in a URL,
	// are refused before any entry is parsed: what comes before such a
	// piece may be the rest of its password, which no mask knows.
	if m.split.to > 0 {
		return nil, m.invalid("node %s: its user or password holds a comma, which separates the nodes of a list: "+
			"write a comma in a password as %%2C (and a node with a user or password as redis://USER:PASSWORD@host:port)",
			m.quote(m.split.from, m.split.to))
	}
	entries := strings.Split(list, ",")
	for i := len(entries) - 1; i >= 0; i-- {
		// The last: the entries before it may be pieces of its password.
		if e := entries[i]; !strings.Contains(e, "://") && strings.Contains(e, "@") {
			return nil, m.noURL(entries, i)
		}
	}
	var opts []*redis.Options
	seen := map[string]int{}
	quoted := map[int]string{} // entry i as its errors quote it
	cut := map[int]bool{}      // entry i's credential holds a / ? or #, which end it
	at := 0
	for i, e := range entries {
		from := at
		at += len(e) + 1
		lead := len(e) - len(strings.TrimLeftFunc(e, unicode.IsSpace))
		e = strings.TrimSpace(e)
		quoted[i] = m.quote(from+lead, from+lead+len(e))
		if e == "" {
			return nil, m.invalid("node list %s: entry %d is empty (two commas, or one at an end)", m.quote(0, len(list)), i+1)
		}
		if !strings.Contains(e, "://") && m.holds(from+lead, from+lead+len(e)) {
			// A password= option in what is not a URL: the parser's
			// words would quote a piece of it (port "1?password=ab").
			return nil, m.noURL(entries, i)
		}
		cut[i] = m.holdsAny(from+lead, from+lead+len(e), "/?#")
		o, err := parseNode(e)
		if err != nil && cut[i] {
			// The URL parser ends the user information at a / ? or #, so
			// that the rest of the password is a path or a query to it,
			// which its words may quote (database number "Ö@h:1").
			return nil, m.invalid("node %s: a / ? or # in its user or password ends them: write them in a password "+
				"as %%2F %%3F %%23 (the parser's words are left out: they may quote a piece of the password). "+
				"A URL looks like redis://host:6379/0, with USER:PASSWORD@ before the host, or rediss:// for TLS", quoted[i])
		}
		if err != nil {
			return nil, m.invalid("node %s: %s", quoted[i], err)
		}
		id := serverID(o)
		if j, ok := seen[id]; ok && (cut[i] || cut[j]) {
			// The address may be a piece of a password (unix://u:/p@/s).
			return nil, m.invalid("node %s and node %s talk to the same server, which would vote twice: "+
				"give each independent node once (and write a / ? or # in a password as %%2F %%3F %%23)", quoted[j], quoted[i])
		}
		if j, ok := seen[id]; ok {
			return nil, m.invalid("node %s and node %s talk to the same server (%s), which would vote twice: "+
				"give each independent node once", quoted[j], quoted[i], id)
		}
		seen[id] = i
		opts = append(opts, o)
	}
	return opts, nil
}

// parseNode parses one entry of a node list.
func parseNode(e string) (*redis.Options, error) {
	if strings.Count(e, "://") > 1 || !strings.Contains(e, "://") && strings.ContainsAny(e, "; \t") {
		return nil, errors.New("not one node: separate the nodes of a list with commas, such as 10.0.0.1:6379,10.0.0.2:6379")
	}
	if !strings.Contains(e, "://") {
		if !strings.Contains(e, ":") {
			return nil, errors.New("no port: give host:port, such as " + e + ":6379")
		}
		if err := checkAddr(e); err != nil {
			return nil, err
		}
		o := &redis.Options{Addr: e}
		clientDefaults(o, nil)
		return o, nil
	}
	o, err := redis.ParseURL(e)
	if err != nil {
		return nil, errors.New(urlProblem(err) + ". A URL looks like redis://host:6379/0, with USER:PASSWORD@ before the host, " +
			"or rediss:// for TLS. Write a / ? # @ % or , in a password as %2F %3F %23 %40 %25 %2C")
	}
	if o.Network != "unix" {
		if err := checkAddr(o.Addr); err != nil {
			return nil, err
		}
	}
	var set url.Values
	if _, q, ok := strings.Cut(e, "?"); ok {
		set, _ = url.ParseQuery(q) // ParseURL has read it already
	}
	clientDefaults(o, set)
	return o, nil
}

// clientDefaults sets the client settings a Redlock wants (see ParseNodes)
// that the URL's query, set, did not set.
func clientDefaults(o *redis.Options, set url.Values) {
	if !set.Has("max_retries") {
		o.MaxRetries = -1
	}
	if !set.Has("context_timeout_enabled") {
		o.ContextTimeoutEnabled = true
	}
	o.DialerRetries = 1
}

// checkAddr refuses an address that no server can have: a host with a
// slash (a URL missing its ':', such as redis//host:6379) or a port outside
// 1-65535.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("not host:port (" + err.Error() + ")")
	}
	if host == "" || strings.ContainsAny(host, "/@ ") {
		return errors.New("host " + strconv.Quote(host) + " is not a host name or address (a URL starts with redis:// or rediss://)")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("port " + strconv.Quote(port) + " is not a port (1-65535)")
	}
	return nil
}

// serverID names the server an Options reaches, the same for every way of
// writing its address: the host in lower case, an IP address in its
// canonical form, and no database.
func serverID(o *redis.Options) string {
	if o.Network == "unix" {
		return "unix:" + o.Addr
	}
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return o.Addr
	}
	host = strings.ToLower(host)
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return net.JoinHostPort(host, port)
}

// urlProblem says what is wrong with a node URL that does not parse,
// without quoting the parser's words when they are about the URL's text:
// they may hold a piece of the password (an escape, a port cut from it).
func urlProblem(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return maskCredentials(err.Error()) // go-redis's own words: the scheme, the database, an option
	}
	var ee url.EscapeError
	var he url.InvalidHostError
	switch {
	case errors.As(ue.Err, &ee):
		return "a % that does not start a %XX escape (write % as %25)"
	case errors.As(ue.Err, &he):
		return "a character that a host name cannot have"
	case strings.Contains(ue.Err.Error(), "invalid port"):
		return "not a port after the host"
	}
	return "not a URL"
}

// maskCredentials returns s with the user information of a URL (what
// stands between "://" and the last "@" before a space or a comma) and
// password= values replaced by "xxxxx", so that an error quoting a node
// never shows a password.
func maskCredentials(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			break
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexAny(s, " ,")
		if end < 0 {
			end = len(s)
		}
		if at := strings.LastIndex(s[:end], "@"); at >= 0 {
			b.WriteString("xxxxx")
			s = s[at:]
		}
	}
	b.WriteString(s)
	out := b.String()
	lower := strings.ToLower(out)
	for from := 0; ; {
		i := strings.Index(lower[from:], "password=")
		if i < 0 {
			break
		}
		start := from + i + len("password=")
		end := start
		for end < len(out) && !strings.ContainsRune("& ,", rune(out[end])) {
			end++
		}
		out = out[:start] + "xxxxx" + out[end:]
		lower = strings.ToLower(out)
		from = start + len("xxxxx")
	}
	return out
}

// Open returns a Redlock over the nodes of list (see [ParseNodes]), with a
// *redis.Client for each that [Redlock.Close] closes. opts are New's:
//
//	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES")) // 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
//
// It connects to no node. Its clients make go-redis log nothing of a node
// that refuses connections: [WithErrorHandler] and the observer's Connection
// hear of it once (and the observer of its return); a refusing node is
// dialed again a second later at the earliest. Open returns ParseNodes's
// and New's errors.
func Open(list string, opts ...Option) (*Redlock, error) {
	parsed, err := ParseNodes(list)
	if err != nil {
		return nil, err
	}
	def := defaultConfig()
	cfg, err := with(&def, opts)
	if err != nil {
		return nil, err
	}
	clients := make([]redis.UniversalClient, len(parsed))
	var made atomic.Pointer[Redlock] // set once New returned; a dial before reports nothing
	for i, o := range parsed {
		// The client's dial outlasts the node timeout, so that the
		// Redlock's timeout is the one that decides.
		o.DialTimeout = max(o.DialTimeout, 2*cfg.nodeTimeout)
		o.Dialer = dial.New(dial.Func(redis.NewDialer(o)), func(up bool, err error) {
			if r := made.Load(); r != nil {
				r.connection(i, up, err)
			}
		}).Dial
		clients[i] = redis.NewClient(o)
	}
	r, err := New(clients, opts...)
	if err != nil {
		closeAll(clients)
		return nil, err
	}
	r.owned = clients
	made.Store(r)
	return r, nil
}

// OpConnect is the operation of a [NodeError] that says a node of a
// Redlock made by [Open] stopped accepting connections.
const OpConnect Op = "connect"

// connection reports that node i, one of Open's, stopped (up false, with
// the dial's error) or started accepting connections: to the observer's
// Connection hook, and a stop to the error handler too. Go-redis logs
// nothing of it (internal/dial).
func (r *Redlock) connection(i int, up bool, err error) {
	addr := r.nodes[i].Addr()
	if !up && r.cfg.onError != nil {
		r.cfg.onError(&NodeError{Node: i, Addr: addr, Op: OpConnect, Err: err})
	}
	if r.cfg.observer != nil {
		safely(r.cfg.observer.Connection, ConnectionInfo{Node: i, Addr: addr, Up: up, Err: err})
	}
}
