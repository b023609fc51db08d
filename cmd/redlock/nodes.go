package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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

// node is one node's client and the name to show for it.
type node struct {
	name   string
	client *redis.Client
}

// dial makes one client per node in list, without connecting. Each
// client's own timeouts are above the node timeout, so that redlock's
// timeout is the one that decides.
func dial(list string, nodeTimeout time.Duration) ([]node, error) {
	if list == "" {
		list = os.Getenv("REDLOCK_NODES")
	}
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("no nodes: give --nodes host1:6379,host2:6379,host3:6379 or set REDLOCK_NODES")
	}
	var nodes []node
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("--nodes %q has an empty entry", redact(list))
		}
		var o *redis.Options
		if strings.Contains(a, "://") {
			var err error
			if o, err = redis.ParseURL(a); err != nil {
				return nil, fmt.Errorf("node %q: %s (a URL looks like redis://host:6379/0, with USER:PASSWORD@ before the host, or rediss:// for TLS)", redact(a), redact(err.Error()))
			}
		} else {
			if !strings.Contains(a, ":") {
				return nil, fmt.Errorf("node %q has no port: give host:port, such as %s:6379", a, a)
			}
			o = &redis.Options{Addr: a}
		}
		if err := checkAddr(o.Addr); err != nil {
			return nil, fmt.Errorf("node %q: %v", redact(a), err)
		}
		o.DialTimeout = max(o.DialTimeout, 2*nodeTimeout)
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1 // redlock retries attempts itself
		// One dial, not go-redis's five 100ms apart: a node that refuses
		// the connection is known dead at once, and a run (and Close,
		// which waits for what is in flight) does not pay for it.
		o.DialerRetries = 1
		name := o.Addr
		if o.DB != 0 {
			name = fmt.Sprintf("%s/%d", o.Addr, o.DB)
		}
		nodes = append(nodes, node{name: name, client: redis.NewClient(o)})
	}
	return nodes, nil
}

// checkAddr refuses an address that no server can have: a host with a
// slash (a URL missing its ':', such as redis//host:6379) or a port outside
// 1-65535.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not host:port (%v)", err)
	}
	if host == "" || strings.ContainsAny(host, "/@ ") {
		return fmt.Errorf("host %q is not a host name or address (a URL starts with redis:// or rediss://)", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a port (1-65535)", port)
	}
	return nil
}

// credentials matches what may hold a password in a node string: the user
// information before an "@" (with or without its "scheme://", which a typo
// may have mangled: "redis:/u:pw@h", "u:pw@h"), and a password given as a
// URL query parameter.
var credentials = regexp.MustCompile(`[^\s/"',=(@]+@|(?i)(password=)[^&\s"',]*`)

// redact returns s with every credential in it replaced by "xxxxx": a node
// list or an error that quotes one never shows a password (go-redis reads a
// lone user name as the password, so all of it goes).
func redact(s string) string {
	return credentials.ReplaceAllStringFunc(s, func(c string) string {
		switch {
		case c == ":PASSWORD@" || c == "USER:PASSWORD@":
			return c // redlock's own hints, not a password
		case strings.HasSuffix(c, "@"):
			return "xxxxx@"
		}
		return c[:len("password=")] + "xxxxx"
	})
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
