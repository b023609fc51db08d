package benchmarks

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// ceiling measures what no Go library on go-redis can beat on this machine
// and these nodes, for the sequential workload: acquire + release of one
// resource with SET NX PX and a compare-and-delete script, over one raw
// socket per node, written to every node and then read from every node, all
// from one goroutine. No pool, no goroutine per node, no timeouts, no
// quorum bookkeeping, no error handling beyond the reply's first byte: the
// cost left is the nodes' and the kernel's.
func ceiling(t *testing.T, addrs []string, key string) float64 {
	conns := make([]net.Conn, len(addrs))
	rds := make([]*bufio.Reader, len(addrs))
	for i, a := range addrs {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatalf("ceiling: %v", err)
		}
		defer func() { _ = c.Close() }()
		conns[i], rds[i] = c, bufio.NewReader(c)
	}
	resp := func(args ...string) []byte {
		b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
		for _, a := range args {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
		}
		return b
	}
	round := func(p []byte, want byte) bool {
		for _, c := range conns {
			if _, err := c.Write(p); err != nil {
				t.Fatalf("ceiling: %v", err)
			}
		}
		ok := 0
		for _, r := range rds {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("ceiling: %v", err)
			}
			if line[0] == want {
				ok++
			}
		}
		return ok > len(conns)/2
	}
	const value = "0123456789abcdef0123456789abcdef"
	acquire := resp("SET", key, value, "NX", "PX", strconv.FormatInt(ttl.Milliseconds(), 10))
	release := resp("EVAL", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`, "1", key, value)
	n := 0
	begin := time.Now()
	for time.Since(begin) < *duration {
		if !round(acquire, '+') || !round(release, ':') {
			t.Fatalf("ceiling: no quorum")
		}
		n++
	}
	return float64(n) / time.Since(begin).Seconds()
}
