package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
)

// A node list parses into one Options per entry, in order, with the client
// settings a Redlock wants where the entry does not set its own.
func TestParseNodes(t *testing.T) {
	t.Parallel()
	opts, err := redlock.ParseNodes(" 10.0.0.1:6379, redis://u:s3cret@10.0.0.2:6380/2 ,rediss://10.0.0.3:6381?max_retries=3,unix:///run/redis.sock")
	require.NoError(t, err)
	require.Len(t, opts, 4)
	assert.Equal(t, "10.0.0.1:6379", opts[0].Addr)
	assert.Equal(t, "10.0.0.2:6380", opts[1].Addr)
	assert.Equal(t, 2, opts[1].DB)
	assert.Equal(t, "u", opts[1].Username)
	assert.Equal(t, "s3cret", opts[1].Password)
	assert.Nil(t, opts[1].TLSConfig)
	assert.NotNil(t, opts[2].TLSConfig, "rediss:// is TLS")
	assert.Equal(t, "unix", opts[3].Network)
	for i, o := range opts {
		assert.True(t, o.ContextTimeoutEnabled, "entry %d", i)
		assert.Equal(t, 1, o.DialerRetries, "entry %d", i)
	}
	assert.Equal(t, -1, opts[0].MaxRetries, "a Redlock retries itself")
	assert.Equal(t, 3, opts[2].MaxRetries, "the URL's own max_retries stands")
}

// Every bad list gets an error that matches ErrInvalidArgument, says what is
// wrong and how to write it, and never shows a password.
func TestParseNodesRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		list string
		says []string
	}{
		{"", []string{"empty", "10.0.0.1:6379,10.0.0.2:6379"}},
		{"   ", []string{"empty"}},
		{"a:1,,b:1", []string{"entry 2 is empty"}},
		{"a:1,", []string{"entry 2 is empty"}},
		{"a:1;b:1;c:1", []string{"separate the nodes of a list with commas"}},
		{"a:1 b:1", []string{"separate the nodes of a list with commas"}},
		{"redis-1", []string{`"redis-1"`, "no port", "redis-1:6379"}},
		{"a:0", []string{`port "0"`, "1-65535"}},
		{"a:70000", []string{"1-65535"}},
		{"redis//a:6379", []string{"redis:// or rediss://"}},
		{"http://u:hunter22@a:6379", []string{"redis://host:6379/0"}},
		{"redis://u:hunter22@a:6379/x", []string{"redis://host:6379/0"}},
		{"redis://u:hun%zzter22@a:6379", []string{"%25"}},
		// One server twice, however it is written: any database, any case,
		// any form of one IP address.
		{"127.0.0.1:6379,redis://u:hunter22@127.0.0.1:6379/3", []string{`node "127.0.0.1:6379" and node "redis://xxxxx@127.0.0.1:6379/3"`, "same server (127.0.0.1:6379)", "vote twice"}},
		{"Redis-A:6379,redis-a:6379", []string{"same server (redis-a:6379)"}},
		{"[::1]:6379,redis://[0:0:0:0:0:0:0:1]:6379", []string{"same server ([::1]:6379)"}},
		{"a:1,b:1,a:1", []string{`node "a:1" and node "a:1"`}},
	} {
		_, err := redlock.ParseNodes(c.list)
		if !assert.Error(t, err, "%q", c.list) {
			continue
		}
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "%q", c.list)
		for _, s := range c.says {
			assert.Contains(t, err.Error(), s, "%q", c.list)
		}
		assert.NotContains(t, err.Error(), "hunter22", "%q: a password in an error", c.list)
		_, err = redlock.Open(c.list)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "Open(%q)", c.list)
	}
}

// Open makes the clients, runs locks on them, and closes them with the
// Redlock; New's errors reach its caller with nothing left open.
func TestOpen(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	nodes := redistest.Start(t, 3)
	list := nodes[0].Addr() + ", " + nodes[1].Addr() + ",redis://" + nodes[2].Addr() + "/1"
	rl, err := redlock.Open(list, redlock.WithNodeTimeout(200*time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, 3, rl.Nodes())
	ctx := context.Background()
	lock, err := rl.Acquire(ctx, []string{"open:1"}, 10*time.Second)
	require.NoError(t, err)
	_, err = rl.Acquire(ctx, []string{"open:1"}, 10*time.Second, redlock.WithRetryCount(0))
	assert.ErrorIs(t, err, redlock.ErrResourceLocked)
	_, err = lock.Release(ctx)
	require.NoError(t, err)
	// The third node's database is 1.
	c := redis.NewClient(&redis.Options{Addr: nodes[2].Addr(), DB: 1})
	defer c.Close()
	lock, err = rl.Acquire(ctx, []string{"open:2"}, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Get(ctx, "open:2").Val() == lock.Value() }, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, rl.Close())
	_, err = rl.Acquire(ctx, []string{"open:3"}, 10*time.Second)
	require.Error(t, err, "the clients are closed")
	assert.False(t, errors.Is(err, redlock.ErrResourceLocked), "%v", err)

	_, err = redlock.Open(nodes[0].Addr(), redlock.WithNodeTimeout(-1))
	assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.True(t, strings.Contains(err.Error(), "WithNodeTimeout"), "%v", err)
}

// A password never shows in ParseNodes' errors, whatever its characters:
// a comma or a space in it (the list is split at commas first), an "@",
// an escape, a piece of it that a parser quotes. (A helper's probe found
// the first half of a password with a comma, and a password with a space,
// in the errors.)
func TestParseNodesNeverShowsAPassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ list, secret string }{
		{"redis://u:pa,ssw0rdXYZ@h:6379", "ssw0rdXYZ"},                 // unencoded comma: first half in entry 1
		{"redis://u:SECRETpart,tail@h:6379", "SECRETpart"},             // first half of password
		{"redis://u:SECRET pass@h:6379", "SECRET"},                     // space in password
		{"redis://u:abc,,SECRETZZ@h:6379", "SECRETZZ"},                 // double comma → empty entry error quoting the list
		{"a:1,,redis://u:S3CR,ETQQ@h:6379", "S3CR"},                    // empty entry error quotes the list
		{"redis://u:p@ss@h:6379,redis://u:p@ss@h:6379", "p@ss"},        // '@' in password, duplicate
		{"redis://u:p%zzSECRET@h:6379", "SECRET"},                      // bad escape
		{"redis://u:SECRET%2Cx@h:99999", "SECRET"},                     // bad port
		{"redis://u:SECRET#frag@h:6379", "SECRET"},                     // '#' in password
		{"redis://u:SECRET?x@h:6379", "SECRET"},                        // '?'
		{"redis://u:SECRET/x@h:6379", "SECRET"},                        // '/'
		{"redis://:SECRET@h:6379/abc", "SECRET"},                       // bad db
		{"redis://h:6379?password=SECRET&foo=bar", "SECRET"},           // unknown option
		{"redis://h:6379?foo=bar&password=SECRET", "SECRET"},           // unknown option
		{"redis://h:6379?Password=SECRET&foo=1", "SECRET"},             //
		{"redis://h:6379?password=SEC%20RET&foo=1", "SEC"},             //
		{"redis://u:SECRET@h:6379?dial_timeout=zz", "SECRET"},          // bad option value
		{"redis://u:SECRET@h:6379?db=zz", "SECRET"},                    //
		{"redis://u:SECRET@h:6379?max_retries=SECRETx", "SECRET"},      //
		{"redis://u:SECRET@[::1:6379", "SECRET"},                       // bad ipv6
		{"redis://u:SECRET@h:6379 ,redis://u:SECRET@h:6379", "SECRET"}, // dup with space
		{"REDIS://u:SECRET@h:6379/0/1", "SECRET"},
		{"redis://u:SEC:RET@h", "SEC"},
		{"redis://u:SECRET@", "SECRET"},
		{"redis://u:SECRET@/x", "SECRET"},
		{"redis://u:SECRET@h:6379\t,a", "SECRET"},
		{"redis://u:SECRET\t@h:6379", "SECRET"},
		{"redis://u:SECRET\n@h:6379", "SECRET"},
		{"unix://u:SECRET@/tmp/x.sock?db=zz", "SECRET"},
		{"unix://u:SECRET@/tmp/x.sock,unix://u:SECRET@/tmp/x.sock", "SECRET"},
		{"rediss://u:SECRET@h:6379?skip_verify=zz", "SECRET"},
		{"redis://u:SECRET%@h:6379", "SECRET"},
		{"redis://u:SECRET@h:6379?protocol=zz", "SECRET"},
	} {
		_, err := redlock.ParseNodes(c.list)
		if err == nil {
			continue
		}
		assert.NotContains(t, err.Error(), c.secret, "a password in the error for %q", c.list)
	}

	// Pieces of 1 or 2 characters, before and after commas, which a look
	// for the password's text cannot find (a "w" is in "write"): the whole
	// error, exactly. ("redis://:p@ss,w@127.0.0.1:7411" quoted host
	// "w@127.0.0.1"; "u@h:1" host "u@h".)
	const split = ": its user or password holds a comma, which separates the nodes of a list: " +
		"write a comma in a password as %2C (and a node with a user or password as redis://USER:PASSWORD@host:port)"
	const bare = ": a user or password in a node that is not a URL: " +
		"write the node as redis://USER:PASSWORD@host:port (a comma in a password as %2C)"
	const ends = ": a / ? or # in its user or password ends them: write them in a password as %2F %3F %23 " +
		"(the parser's words are left out: they may quote a piece of the password). " +
		"A URL looks like redis://host:6379/0, with USER:PASSWORD@ before the host, or rediss:// for TLS"
	for _, c := range []struct{ list, want string }{
		{"redis://:p@ss,w@127.0.0.1:7411", `node "redis://xxxxx@127.0.0.1:7411"` + split},
		{"redis://u:p,w@h:1", `node "redis://xxxxx@h:1"` + split},
		{"redis://:a,b,c@h:1", `node "redis://xxxxx@h:1"` + split},
		{"redis://:,@h:1", `node "redis://xxxxx@h:1"` + split},
		{"redis://:a,bc@h:1", `node "redis://xxxxx@h:1"` + split},
		{"redis://:ab,c@h:1", `node "redis://xxxxx@h:1"` + split},
		{"redis://:ab,cd@h", `node "redis://xxxxx@h"` + split},
		{"redis://:p@s/s,w@h:1", `node "redis://xxxxx@h:1"` + split},                   // a database cut from it
		{"redis://:p@h:99999,w@h:1", `node "redis://xxxxx@h:1"` + split},               // a port cut from it
		{"redis://:p@10.0.0.1:1,10.0.0.1:1,w@h:1", `node "redis://xxxxx@h:1"` + split}, // a server twice cut from it
		{"10.0.0.9:1, rediss://:q,Z@h:1 ,10.0.0.8:1", `node "rediss://xxxxx@h:1"` + split},
		{"redis://h1:1,u:p@h2:2", `node "redis://xxxxx@h2:2"` + split}, // or a node's redis:// left out
		{"u@h:1", `node "xxxxx@h:1"` + bare},
		{"a:1, pq@h:1", `node "xxxxx@h:1"` + bare},
		{"u:p@h:1", `node "xxxxx@h:1"` + bare},
		{"h:1?password=ab", `node "h:1?password=xxxxx"` + bare},
		{"h?password=x:1,h?password=x:1", `node "h?password=xxxxx"` + bare},
		{"a,b@h:1", `node "xxxxx@h:1"` + bare}, // "a" may be the password's
		{"u:a,b@h:1", `node "xxxxx@h:1"` + bare},
		{"10.0.0.1:1,,u:ab,cd@h:1", `node "xxxxx@h:1"` + bare},
		{"a@b,c@h:1", `node "xxxxx@h:1"` + bare}, // "b" may be the password's
		// A / ? or # ends the user information for the URL parser: the
		// rest is a database or an option to it, which it quotes.
		{"redis://:/x@h:1", `node "redis://xxxxx@h:1"` + ends},
		{"redis://:p?q@h:1", `node "redis://xxxxx@h:1"` + ends},
		{"redis://:p#q@h:1/0", `node "redis://xxxxx@h:1/0"` + ends},
		{"unix://u:/a@/s,unix://u:/a@/s", `node "unix://xxxxx@/s" and node "unix://xxxxx@/s" talk to the same server, ` +
			"which would vote twice: give each independent node once (and write a / ? or # in a password as %2F %3F %23)"},
	} {
		_, err := redlock.ParseNodes(c.list)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument, "ParseNodes(%q)", c.list)
		assert.EqualError(t, err, "redlock: invalid argument: "+c.want, "ParseNodes(%q)", c.list)
	}
	// Written as the error says, the comma is the password's.
	opts, err := redlock.ParseNodes("redis://:p@ss%2Cw@127.0.0.1:7411")
	require.NoError(t, err)
	require.Len(t, opts, 1)
	assert.Equal(t, "p@ss,w", opts[0].Password)
	assert.Equal(t, "127.0.0.1:7411", opts[0].Addr)
}

// An error quotes its entry as given, less the blanks around it, whatever
// they are.
func TestParseNodesQuotesTheEntry(t *testing.T) {
	t.Parallel()
	for _, list := range []string{"a:1,\r\n redis-9 \t", "a:1, redis-9", "\vredis-9"} {
		_, err := redlock.ParseNodes(list)
		require.Error(t, err, "%q", list)
		assert.Contains(t, err.Error(), `node "redis-9": no port`, "%q", list)
	}
}
