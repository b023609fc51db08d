package redlockotel_test

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain starts the three redis-server nodes that the Examples run on and
// sets REDLOCK_NODES to their list, so that an Example gets its nodes as a
// program does: redlock.Open(os.Getenv("REDLOCK_NODES")). The list is always
// these nodes', never one from the environment. The nodes stop after the
// tests.
//
// As for the tests on real nodes (internal/redistest), a machine without
// redis-server skips the Examples, unless CI is set: then they fail.
// (internal/redistest starts its nodes for one test; these live through
// the whole run.)
func TestMain(m *testing.M) {
	flag.Parse() // before changing -test.skip
	nodes, err := startNodes(3)
	switch {
	case errors.Is(err, exec.ErrNotFound) && os.Getenv("CI") == "":
		fmt.Fprintln(os.Stderr, "redis-server not found: the Examples are skipped")
		skip := "^Example"
		if s := flag.Lookup("test.skip").Value.String(); s != "" {
			skip = s + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case err != nil:
		fmt.Fprintln(os.Stderr, "starting the Examples' nodes:", err)
		os.Exit(1)
	}
	list := make([]string, len(nodes))
	for i, n := range nodes {
		list[i] = n.addr
	}
	if err := os.Setenv("REDLOCK_NODES", strings.Join(list, ",")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	for _, n := range nodes {
		n.stop()
	}
	os.Exit(code)
}

// node is one redis-server process on loopback, without persistence.
type node struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

// startNodes starts n nodes, or none: on an error it stops those it started.
func startNodes(n int) ([]*node, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	var nodes []*node
	for range n {
		nd, err := startNode(bin)
		if err != nil {
			for _, nd := range nodes {
				nd.stop()
			}
			return nil, err
		}
		nodes = append(nodes, nd)
	}
	return nodes, nil
}

// startNode starts one node and waits until it answers PING. A port free
// when probed can be taken before the server binds it: it tries a few.
func startNode(bin string) (*node, error) {
	dir, err := os.MkdirTemp("", "redlockotel-node-")
	if err != nil {
		return nil, err
	}
	for range 5 {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		nd := &node{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
		nd.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "")
		if err = nd.cmd.Start(); err != nil {
			break
		}
		if err = nd.ready(5 * time.Second); err == nil {
			return nd, nil
		}
		nd.kill()
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server: %w", err)
}

// ready waits until the node answers PING, for at most d.
func (nd *node) ready(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", nd.addr, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			var line string
			if _, err = c.Write([]byte("PING\r\n")); err == nil {
				line, err = bufio.NewReader(c).ReadString('\n')
			}
			_ = c.Close()
			if err == nil && strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer PING within %v (last: %v)", nd.addr, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the process and waits for it.
func (nd *node) kill() {
	_ = nd.cmd.Process.Kill()
	_ = nd.cmd.Wait()
}

// stop ends the process and removes its directory.
func (nd *node) stop() {
	nd.kill()
	_ = os.RemoveAll(nd.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
