// Package redistest starts real redis-server processes on loopback for the
// tests of this module, and lets them be paused, killed and restarted.
//
// Every test that needs Redis goes through it. When redis-server is not
// installed the tests skip, unless the CI environment variable is set, in
// which case they fail: CI must never pass by skipping the real-node tests.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Require skips t when redis-server is missing, or fails it when CI is set
// or when $REDISTEST_SERVER_DIR names a server that is not there.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		if dir := os.Getenv(ServerDirEnv); dir != "" {
			t.Fatalf("%s=%s holds no redis-server (%v): point it at a directory holding redis-server and redis-cli, or unset it", ServerDirEnv, dir, err)
		}
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not found (%v) and CI is set: real-node tests must run", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
}

// Node is one redis-server process on 127.0.0.1. Its methods are safe for
// concurrent use.
type Node struct {
	tb   testing.TB
	dir  string
	port int

	extra []string // more redis-server arguments (cluster mode)
	bus   int      // cluster mode: the cluster bus port
	conf  string   // a config file, given first (Sentinel needs one it can rewrite)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error // receives cmd.Wait's result once the process is gone
	paused bool
}

// Start starts n independent redis-server nodes, with no persistence, each in
// its own temporary directory, and stops them when the test ends.
func Start(tb testing.TB, n int) []*Node {
	tb.Helper()
	Require(tb)
	nodes := make([]*Node, n)
	for i := range nodes {
		nodes[i] = StartNode(tb)
	}
	return nodes
}

// StartNode starts one node (see Start).
func StartNode(tb testing.TB) *Node {
	tb.Helper()
	return startNode(tb, false)
}

// StartNodeWith starts one node with more redis-server arguments
// ("--rename-command", "SSUBSCRIBE", "" for a server without a command).
func StartNodeWith(tb testing.TB, args ...string) *Node {
	tb.Helper()
	return startNodeWith(tb, false, "", args)
}

func startNode(tb testing.TB, cluster bool) *Node {
	return startNodeWith(tb, cluster, "", nil)
}

// startNodeWith starts a node with the config file conf (none when empty)
// and more arguments.
func startNodeWith(tb testing.TB, cluster bool, conf string, extra []string) *Node {
	tb.Helper()
	Require(tb)
	nd := &Node{tb: tb, dir: tb.TempDir(), conf: conf}
	var err error
	// A free port can be taken by someone else between our probe and the
	// server's bind; try a few.
	for range 5 {
		if nd.port, err = freePort(); err != nil {
			continue
		}
		nd.extra = nil
		if cluster {
			if err = nd.clusterArgs(); err != nil {
				continue
			}
		}
		nd.extra = append(nd.extra, extra...)
		if err = nd.start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: starting redis-server: %v", err)
	}
	tb.Cleanup(nd.stop)
	return nd
}

// clusterArgs sets the arguments of a Cluster node on nd.port, with a bus
// port of its own.
func (nd *Node) clusterArgs() error {
	nd.extra = []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nd.dir, "nodes.conf"),
		"--cluster-node-timeout", "5000"}
	s, err := version()
	if err != nil {
		return err
	}
	if s.AtLeast(7, 0) {
		// The bus port is set explicitly: port+10000, the default,
		// can be past 65535 for a port the kernel picked.
		if nd.bus, err = freePort(); err != nil {
			return err
		}
		nd.extra = append(nd.extra, "--cluster-port", strconv.Itoa(nd.bus))
		return nil
	}
	// Redis 6.2 has no cluster-port: its bus is port+10000, so the node
	// needs a port below 55536 whose bus port is free too.
	for range 200 {
		p, err := freePort()
		if err != nil {
			return err
		}
		if p+10000 > 65535 || !portFree(p+10000) {
			continue
		}
		nd.port, nd.bus = p, p+10000
		return nil
	}
	return fmt.Errorf("no free port below 55536 with a free port 10000 above it (Redis %d.%d's cluster bus)", s.Major, s.Minor)
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs redis-server on nd.port and waits until it answers PING.
func (nd *Node) start() error {
	logf, err := os.Create(filepath.Join(nd.dir, "redis-"+strconv.Itoa(nd.port)+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	var args []string
	if nd.conf != "" {
		args = append(args, nd.conf)
	}
	args = append(args,
		"--port", strconv.Itoa(nd.port),
		"--bind", "127.0.0.1",
		"--dir", nd.dir,
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	args = append(args, nd.extra...)
	cmd := exec.Command(Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: nd.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		if err == nil {
			// The answer must be this process's: a port freed by a kill
			// can be taken by another test process's server meanwhile,
			// whose PING would pass for ours (and whose keys would then
			// vote in this test).
			var info string
			info, err = c.Info(ctx, "server").Result()
			if err == nil && !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				err = fmt.Errorf("another server answers on port %d", nd.port)
			}
		}
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			out, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("redis-server on port %d exited: %v: %s", nd.port, werr, out)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server on port %d did not answer PING: %v", nd.port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	nd.mu.Lock()
	nd.cmd, nd.exited = cmd, exited
	nd.mu.Unlock()
	return nil
}

// Addr returns the node's host:port.
func (nd *Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(nd.port) }

// Client returns a new go-redis client for the node, closed when the test
// ends. opts, if given, is used with its Addr replaced.
func (nd *Node) Client(opts ...*redis.Options) *redis.Client {
	o := &redis.Options{}
	if len(opts) > 0 && opts[0] != nil {
		cp := *opts[0]
		o = &cp
	}
	o.Addr = nd.Addr()
	c := redis.NewClient(o)
	nd.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause stops the process with SIGSTOP: the node accepts connections (the
// kernel does) but never answers, as a hung node does.
func (nd *Node) Pause() { nd.signal(syscall.SIGSTOP, true) }

// Resume continues a paused node.
func (nd *Node) Resume() { nd.signal(syscall.SIGCONT, false) }

func (nd *Node) signal(sig syscall.Signal, paused bool) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		nd.tb.Fatalf("redistest: node %s is not running", nd.Addr())
	}
	if err := nd.cmd.Process.Signal(sig); err != nil {
		nd.tb.Fatalf("redistest: signal %v to %s: %v", sig, nd.Addr(), err)
	}
	nd.paused = paused
}

// Kill ends the process at once (SIGKILL); its data is lost.
func (nd *Node) Kill() {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.killLocked()
}

func (nd *Node) killLocked() {
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Kill() // SIGKILL ends a stopped process too
	<-nd.exited               // reaped: the port is free for Restart
	nd.cmd, nd.exited, nd.paused = nil, nil, false
}

// Restart kills the node if it runs and starts a new, empty one on the same
// port: a restart with its data lost.
func (nd *Node) Restart() {
	nd.Kill()
	if err := nd.start(); err != nil {
		nd.tb.Fatalf("redistest: restart %s: %v", nd.Addr(), err)
	}
}

func (nd *Node) stop() {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.killLocked()
}

// StartCluster starts a Redis Cluster of n masters (n >= 3) on loopback, with
// the hash slots spread over them, waits until it serves every slot, and
// returns its nodes. Stopped when the test ends.
func StartCluster(tb testing.TB, n int) []*Node {
	tb.Helper()
	Require(tb)
	if _, err := exec.LookPath(CLI); err != nil {
		tb.Fatalf("redistest: redis-cli is needed to create a cluster: %v", err)
	}
	nodes := make([]*Node, n)
	args := []string{"--cluster", "create"}
	for i := range nodes {
		nodes[i] = startNode(tb, true)
		args = append(args, nodes[i].Addr())
	}
	args = append(args, "--cluster-yes")
	if out, err := exec.Command(CLI, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	// Every node must see the cluster as ok: one that does not yet answers
	// CLUSTERDOWN.
	deadline := time.Now().Add(20 * time.Second)
	for _, nd := range nodes {
		c := redis.NewClient(&redis.Options{Addr: nd.Addr()})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				tb.Fatalf("redistest: cluster not ok on %s after 20s: %v %s", nd.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return nodes
}

// StopProcess stops this test process, every goroutine at once, for d,
// starting after (as a long garbage collection, a machine short of CPU or
// a VM's steal stops a client): a child shell sends SIGSTOP and SIGCONT.
// The returned channel is closed once the process runs again. A test that
// calls it stops every test beside it: it must not run in parallel.
func StopProcess(tb testing.TB, after, d time.Duration) <-chan struct{} {
	tb.Helper()
	pid := os.Getpid()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("sleep %.3f; kill -STOP %d; sleep %.3f; kill -CONT %d",
		after.Seconds(), pid, d.Seconds(), pid))
	if err := cmd.Start(); err != nil {
		tb.Fatalf("redistest: start the shell that stops this process: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	tb.Cleanup(func() { <-done })
	return done
}
