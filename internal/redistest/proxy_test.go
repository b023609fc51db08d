package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests, apart from go-redis's
// own redial probe, which ends within a second of the client's Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

func TestProxyFaults(t *testing.T) {
	nd := StartNode(t)
	direct := nd.Client()
	p := NewProxy(t, nd.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()

	require.NoError(t, c.Set(ctx, "k", "healthy", 0).Err(), "SET through a healthy proxy")
	assert.Equal(t, "healthy", direct.Get(ctx, "k").Val())

	p.SetLatency(30*time.Millisecond, 20*time.Millisecond)
	begin := time.Now()
	require.NoError(t, c.Ping(ctx).Err())
	assert.GreaterOrEqual(t, time.Since(begin), 50*time.Millisecond, "PING round trip with 30ms+20ms latency")
	p.SetLatency(0, 0)

	p.Set(DropReplies)
	err := c.Set(ctx, "k", "hang", 0).Err()
	assert.Error(t, err, "SET through a hung proxy gets no answer")
	assert.Eventually(t, func() bool { return direct.Get(ctx, "k").Val() == "hang" }, time.Second, 5*time.Millisecond,
		"under DropReplies the node still acts on the command")

	p.Set(Partition)
	assert.Error(t, c.Set(ctx, "k", "partition", 0).Err(), "SET through a partition")
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, "hang", direct.Get(ctx, "k").Val(), "nothing crosses a partition")

	p.Set(Refuse)
	assert.Error(t, c.Ping(ctx).Err(), "PING while refusing")
	p.Heal()
	assert.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 2*time.Second, 10*time.Millisecond, "healed")

	// Cut ends the open connections; the next command reconnects.
	p.Cut()
	_ = c.Ping(ctx).Err() // may fail on the cut connection
	assert.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 2*time.Second, 10*time.Millisecond, "after Cut")
}

func TestNodeRestartLosesData(t *testing.T) {
	nd := StartNode(t)
	c := nd.Client(&redis.Options{MaxRetries: 3})
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	nd.Restart()
	assert.Eventually(t, func() bool {
		n, err := c.Exists(ctx, "k").Result()
		return err == nil && n == 0
	}, 2*time.Second, 10*time.Millisecond, "the key is gone after a restart")

	nd.Pause()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	assert.Error(t, nd.Client(&redis.Options{ContextTimeoutEnabled: true}).Ping(short).Err(), "a paused node does not answer")
	nd.Resume()
	assert.NoError(t, c.Ping(ctx).Err())
}

// A node restarted on a port that another server took meanwhile (another
// test process's, when suites run side by side) does not pass for
// restarted: that server's PING answer is not its own. (Before, start took
// any PONG, and the test then ran against the other process's keys.)
func TestRestartOnATakenPortFails(t *testing.T) {
	nd := StartNode(t)
	nd.Kill()
	other := exec.Command(Binary, "--port", strconv.Itoa(nd.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(t, other.Start())
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: nd.Addr()})
	defer c.Close()
	require.Eventually(t, func() bool { return c.Ping(context.Background()).Err() == nil }, 10*time.Second, 10*time.Millisecond)
	err := nd.start()
	require.Error(t, err, "a server of another process passed for the restarted node")
	t.Log(err)
}

// Refuse refuses every connection it did not cut, even one the proxy had
// accepted but not yet registered when Refuse came (CI on 47bfb3b: such a
// connection kept working, and a refusing node voted for a lock).
func TestRefuseLeavesNoConnectionOpen(t *testing.T) {
	t.Parallel()
	nd := StartNode(t)
	for round := range 30 {
		p := NewProxy(t, nd.Addr())
		stop := make(chan struct{})
		conns := make(chan net.Conn, 1024)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
					if err != nil {
						continue
					}
					select {
					case conns <- c:
					default:
						_ = c.Close()
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		p.Set(Refuse)
		close(stop)
		wg.Wait()
		close(conns)
		for c := range conns {
			_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 16)
			n, _ := c.Read(buf)
			assert.Zero(t, n, "round %d: a connection answered %q after Refuse", round, buf[:n])
			_ = c.Close()
		}
		p.Close()
	}
}
