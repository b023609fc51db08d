package redlock

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/redis/go-redis/v9"
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

// The masker: a node list's credentials kept out of the errors that quote it.

// A masker hides the credentials of a node list in the errors that quote
// it. A password may hold any character, a comma or a space included (the
// list is split at commas before anything is parsed), so what is hidden is
// found in the whole list: the user information of each URL, from its
// "://" to the last "@" before the next "://"; "user:password@" in an entry
// without a scheme; and the values of password= options, to the next "&"
// or "://".
//
// A credential that holds a comma is cut by the list's split into entries
// of their own, which the parsers read as hosts, ports and databases, and
// quote; a piece under 3 bytes is too short to look for in their words (a
// "w" is in "write"). So ParseNodes refuses, before any parser sees it, a
// URL whose user information holds a comma (split) and an entry that is
// not a URL but holds a credential (holds), quoting each as masked. A / ?
// or # cuts a credential too, for the URL parser, which quotes the rest as
// a database or an option: its words are left out then (holdsAny).
type masker struct {
	list    string
	secret  []bool   // list[i] is part of a credential
	secrets []string // the credentials, and their passwords, 3 bytes or longer
	// split is the first URL whose user information holds a comma, from
	// its entry's start to the end of the entry that holds its "@"; to is
	// 0 when there is none.
	split struct{ from, to int }
}

func newMasker(list string) *masker {
	m := &masker{list: list, secret: make([]bool, len(list))}
	mark := func(from, to int) {
		for i := from; i < to; i++ {
			m.secret[i] = true
		}
		c := list[from:to]
		for _, v := range append([]string{c}, strings.Split(c, ":")...) {
			if len(v) >= 3 {
				m.secrets = append(m.secrets, v)
			}
		}
	}
	nextScheme := func(from int) int {
		if k := strings.Index(list[from:], "://"); k >= 0 {
			return from + k
		}
		return len(list)
	}
	for i := 0; ; {
		k := strings.Index(list[i:], "://")
		if k < 0 {
			break
		}
		start := i + k + 3
		if at := strings.LastIndex(list[start:nextScheme(start)], "@"); at >= 0 {
			mark(start, start+at)
			if m.split.to == 0 && strings.Contains(list[start:start+at], ",") {
				m.split.from, m.split.to = entryAround(list, i+k, start+at)
			}
		}
		i = start
	}
	from := 0
	for _, e := range strings.Split(list, ",") {
		if at := strings.LastIndex(e, "@"); at >= 0 && !strings.Contains(e, "://") {
			mark(from, from+at)
		}
		from += len(e) + 1
	}
	lower := strings.ToLower(list)
	for i := 0; ; {
		k := strings.Index(lower[i:], "password=")
		if k < 0 {
			break
		}
		start := i + k + len("password=")
		end := nextScheme(start)
		if amp := strings.IndexByte(list[start:end], '&'); amp >= 0 {
			end = start + amp
		}
		mark(start, end)
		i = start
	}
	return m
}

// entryAround returns where the entries of list from the one holding
// list[from] to the one holding list[to] start and end, less their blanks.
func entryAround(list string, from, to int) (int, int) {
	from = strings.LastIndexByte(list[:from], ',') + 1
	if c := strings.IndexByte(list[to:], ','); c >= 0 {
		to += c
	} else {
		to = len(list)
	}
	e := list[from:to]
	return from + len(e) - len(strings.TrimLeftFunc(e, unicode.IsSpace)), from + len(strings.TrimRightFunc(e, unicode.IsSpace))
}

// noURL refuses entries[i], which holds a credential but is not a URL.
func (m *masker) noURL(entries []string, i int) error {
	from := 0
	for _, e := range entries[:i] {
		from += len(e) + 1
	}
	e := entries[i]
	lead := len(e) - len(strings.TrimLeftFunc(e, unicode.IsSpace))
	return m.invalid("node %s: a user or password in a node that is not a URL: "+
		"write the node as redis://USER:PASSWORD@host:port (a comma in a password as %%2C)",
		m.quote(from+lead, from+lead+len(strings.TrimSpace(e))))
}

// holds reports whether list[from:to] holds a byte of a credential.
func (m *masker) holds(from, to int) bool {
	return slices.Contains(m.secret[from:to], true)
}

// holdsAny reports whether a credential in list[from:to] holds a byte of
// chars.
func (m *masker) holdsAny(from, to int, chars string) bool {
	for i := from; i < to; i++ {
		if m.secret[i] && strings.IndexByte(chars, m.list[i]) >= 0 {
			return true
		}
	}
	return false
}

// quote returns list[from:to] quoted, each run of credential in it
// replaced by "xxxxx".
func (m *masker) quote(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		if !m.secret[i] {
			b.WriteByte(m.list[i])
			continue
		}
		b.WriteString("xxxxx")
		for i+1 < to && m.secret[i+1] {
			i++
		}
	}
	return strconv.Quote(b.String())
}

// invalid is the package's invalid with every credential of the list masked
// wherever the message has it (a parser's words may quote a piece of one).
func (m *masker) invalid(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	for _, s := range m.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return invalid("%s", msg)
}
