package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/go-redlock/redlock"
)

func init() {
	// go-redis logs its dial failures to stderr; redlock says what went
	// wrong itself.
	redis.SetLogger(quiet{})
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// common are the flags every verb that talks to the nodes has.
type common struct {
	nodes       string
	nodeTimeout time.Duration
	verbose     bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.nodes, "nodes", "",
		"comma-separated `host:port` or redis:// / rediss:// URLs, one per independent node (default: $REDLOCK_NODES)")
	fs.Var((*seconds)(&c.nodeTimeout), "node-timeout", "how long to wait for one node's answer, a `duration` (default 500ms; for run and elect, at most ttl/4: ttl/4 when the ttl is below 2s)")
}

// seconds is a duration flag that also takes a plain number of seconds, as
// flock's -w 0.5 and sleep 5 do: "5" is 5s, "0.5" is 500ms, "30s" and
// "1m30s" are what they say.
type seconds time.Duration

func (d *seconds) String() string { return time.Duration(*d).String() }

func (d *seconds) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > math.MaxInt64/float64(time.Second) {
			return fmt.Errorf("not a duration: %q seconds is out of range", s)
		}
		*d = seconds(time.Duration(f * float64(time.Second)))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration: give seconds (5, 0.5) or a Go duration (30s, 1m30s, 500ms)")
	}
	*d = seconds(v)
	return nil
}

// node is one node's client and the names to show for it.
type node struct {
	name   string // its address, "host:port" or "host:port/db"
	given  string // as --nodes or REDLOCK_NODES gave it, redacted
	client *redis.Client
}

// dial makes one client per node in list, without connecting: the
// library's ParseNodes reads the list (the one parser of node lists), and
// each client's dial outlasts the node timeout, so that redlock's timeout
// is the one that decides.
func dial(list string, nodeTimeout time.Duration) ([]node, error) {
	if list == "" {
		list = os.Getenv("REDLOCK_NODES")
	}
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("no nodes: give --nodes host1:6379,host2:6379,host3:6379 or set REDLOCK_NODES")
	}
	parsed, err := redlock.ParseNodes(list)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), redlock.ErrInvalidArgument.Error()+": ")
		return nil, errors.New(redact(strings.Replace(msg, "node list", "--nodes", 1)))
	}
	entries := strings.Split(list, ",")
	nodes := make([]node, len(parsed))
	for i, o := range parsed {
		o.DialTimeout = max(o.DialTimeout, 2*nodeTimeout)
		name := o.Addr
		if o.DB != 0 {
			name = fmt.Sprintf("%s/%d", o.Addr, o.DB)
		}
		nodes[i] = node{name: name, given: redact(strings.TrimSpace(entries[i])), client: redis.NewClient(o)}
	}
	return nodes, nil
}

// credentials matches what may hold a password in a node string: the user
// information of a URL (everything between "scheme://" and the last "@"
// before a space or a quote, so that a password with an unencoded "/", "@"
// or "=" goes whole), "user:password@" without its "scheme://" (which a
// typo may have mangled: "redis:/u:pw@h", "u:pw@h"), and a password given
// as a URL query parameter. Not a word before an "@" without a ":": a
// lock's value is "random@host/pid". (The credentials of the nodes given
// are masked whole before, whatever their form: see secrets.)
var credentials = regexp.MustCompile(`(://)[^\s"']*@|[^\s/"',=(@:]*:[^\s/"',=(@]*@|(?i)(password=)[^&\s"',]*`)

// redact returns s with every credential in it replaced by "xxxxx": a node
// list or an error that quotes one never shows a password (go-redis reads a
// lone user name as the password, so all of it goes). The credentials of
// the node lists redlock was given (see learnSecrets) go first, in every
// form they may be printed in, wherever they are; then what looks like a
// credential.
func redact(s string) string {
	s = secrets.mask(s)
	return credentials.ReplaceAllStringFunc(s, func(c string) string {
		switch {
		case strings.HasSuffix(c, ":PASSWORD@") || strings.HasSuffix(c, "USER:PASSWORD@"):
			return c // redlock's own hints, not a password
		case strings.HasPrefix(c, "://"):
			return "://xxxxx@"
		case strings.HasSuffix(c, "@"):
			return "xxxxx@"
		}
		return c[:len("password=")] + "xxxxx"
	})
}

// secrets are the credentials of the node lists redlock was given, each in
// the forms it may be printed in: as given, percent-decoded, re-encoded,
// quoted by %q, slog or JSON, and the pieces that a URL parser cuts it
// into. Written before anything is printed (cli's learnSecrets), read by
// every write after: the lock is for the goroutines that log.
var secrets secretSet

type secretSet struct {
	mu   sync.RWMutex
	list []string // longest first, so that a longer form is masked whole
}

// minSecret is the shortest string masked wherever it appears: shorter
// ones (a password "ab") would mask letters of every message, and are
// masked by the pattern where they stand in a URL.
const minSecret = 3

// learnSecrets records the credentials of node lists: REDLOCK_NODES, each
// --nodes value (given as "--nodes X" or "--nodes=X"), and any argument
// that holds a URL with user information.
func learnSecrets(env string, args []string) {
	lists := []string{env}
	for i, a := range args {
		switch name, value, eq := strings.Cut(strings.TrimLeft(a, "-"), "="); {
		case a == "--":
			// The command's arguments: only URLs with credentials count.
		case strings.HasPrefix(a, "-") && name == "nodes" && eq:
			lists = append(lists, value)
			continue
		case strings.HasPrefix(a, "-") && name == "nodes" && i+1 < len(args):
			lists = append(lists, args[i+1])
			continue
		}
		if strings.Contains(a, "://") && strings.Contains(a, "@") {
			lists = append(lists, a)
		}
	}
	var found []string
	for _, l := range lists {
		found = append(found, userInfos(l)...)
	}
	secrets.add(found)
}

// userInfos returns the user information of each node in list: what stands
// between "scheme://" (or the entry's start) and the entry's last "@", and
// the values of password= and username= query parameters. Entries are
// split at commas, and also at each "scheme://", so that a password with a
// comma in it (which splits the entry) is found whole.
func userInfos(list string) []string {
	var infos []string
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if at := strings.LastIndex(e, "@"); at >= 0 {
			start := 0
			if j := strings.Index(e[:at], "://"); j >= 0 {
				start = j + len("://")
			}
			infos = append(infos, e[start:at])
		}
		if _, q, ok := strings.Cut(e, "?"); ok {
			for _, kv := range strings.Split(q, "&") {
				k, v, _ := strings.Cut(kv, "=")
				if strings.EqualFold(k, "password") || strings.EqualFold(k, "username") {
					infos = append(infos, v)
				}
			}
		}
	}
	for rest := list; ; {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		rest = rest[i+len("://"):]
		span := rest
		if j := strings.Index(span, "://"); j >= 0 {
			span = span[:j]
		}
		if at := strings.LastIndex(span, "@"); at >= 0 {
			infos = append(infos, span[:at])
		}
	}
	return infos
}

// add records infos, each user information in the forms it may be printed
// in: whole, its password (after the first ":"), decoded, encoded, quoted,
// and the pieces between the characters a URL parser cuts at.
func (s *secretSet) add(infos []string) {
	forms := map[string]bool{}
	keep := func(v string) {
		if len(v) >= minSecret {
			forms[v] = true
		}
	}
	for _, info := range infos {
		var bases []string
		parts := []string{info}
		if _, pw, ok := strings.Cut(info, ":"); ok {
			parts = append(parts, pw)
		}
		for _, p := range parts {
			for _, r := range []string{p, unescape(p)} {
				bases = append(bases, r)
				bases = append(bases, strings.FieldsFunc(r, cuts)...)
			}
		}
		for _, b := range bases {
			for _, f := range []string{b, url.PathEscape(b), url.QueryEscape(b)} {
				keep(f)
				q := strconv.Quote(f) // %q, and slog's quoting
				keep(q[1 : len(q)-1])
				keep(strings.Trim(strconv.Quote(q), `"`)) // quoted twice: a %q error in a log line
				if j, err := json.Marshal(f); err == nil {
					keep(string(j[1 : len(j)-1]))
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.list {
		forms[f] = true
	}
	s.list = s.list[:0]
	for f := range forms {
		s.list = append(s.list, f)
	}
	sort.Slice(s.list, func(i, j int) bool {
		if len(s.list[i]) != len(s.list[j]) {
			return len(s.list[i]) > len(s.list[j])
		}
		return s.list[i] < s.list[j]
	})
}

// cuts reports whether a URL parser may cut a password at r, and print a
// piece of it as a host, a port, a path or an option: url.Parse cuts at
// "/", "?", "#" and "@", host and port at ":", go-redis's options at "&"
// and "=", a node list at ",".
func cuts(r rune) bool {
	return strings.ContainsRune(":/?#@,&=", r) || unicode.IsSpace(r)
}

// unescape decodes the percent-escapes of s that are valid, and leaves the
// rest as they are (url.PathUnescape gives up on the first bad one).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mask replaces every recorded credential in s with "xxxxx".
func (s *secretSet) mask(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.list {
		if strings.Contains(text, f) {
			text = strings.ReplaceAll(text, f, "xxxxx")
		}
	}
	return text
}

func closeNodes(nodes []node) {
	for _, n := range nodes {
		_ = n.client.Close()
	}
}

func clients(nodes []node) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(nodes))
	for i, n := range nodes {
		cs[i] = n.client
	}
	return cs
}

// newFlagSet returns a flag set that reports its errors as usage errors, with
// usage followed by the flags.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// defaultNodeTimeout is --node-timeout when it is not given (for run, at
// most ttl/4).
const defaultNodeTimeout = 500 * time.Millisecond

// given reports whether the flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// short makes fs's errors short, as go's and git's are: the flag package's
// own message, then where the usage is, not the usage itself (which help
// and -h print to stdout).
func short(fs *flag.FlagSet, stderr io.Writer) {
	fs.Usage = func() { fmt.Fprintf(stderr, "Run 'redlock help %s' for usage.\n", fs.Name()) }
}

// usageError prints msg, one line, and where the verb's usage is, and returns
// the usage exit code.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "redlock %s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintf(stderr, "Run 'redlock help %s' for usage.\n", fs.Name())
	return exitUsage
}
