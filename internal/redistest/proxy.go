package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Fault is what a Proxy does to the traffic it carries.
type Fault int32

// The faults a Proxy can inject. Each applies to open connections at once
// and to new ones.
const (
	// Healthy forwards everything, after the configured latency.
	Healthy Fault = iota
	// DropReplies lets requests through to the node but drops every reply: the
	// node acts on a command and the client never learns of it. Leaving
	// DropReplies or Partition cuts the open connections, whose streams lost bytes.
	DropReplies
	// Partition drops traffic both ways: nothing reaches the node, nothing
	// comes back. Connections stay open.
	Partition
	// Refuse closes the listening socket, so that new connections are
	// refused; open ones are cut.
	Refuse
	// DropRepliesRefusingNew is DropReplies on the open connections (requests reach the
	// node, replies are dropped) with new connections refused: a host that
	// went away while a client still held a connection to it.
	DropRepliesRefusingNew
)

// String names the fault.
func (f Fault) String() string {
	switch f {
	case Healthy:
		return "healthy"
	case DropReplies:
		return "replies dropped"
	case Partition:
		return "partition"
	case Refuse:
		return "refuse"
	case DropRepliesRefusingNew:
		return "replies dropped, new connections refused"
	}
	return "unknown"
}

// Proxy is a loopback TCP proxy in front of a node, with faults that can be
// switched at runtime. Its methods are safe for concurrent use.
type Proxy struct {
	tb     testing.TB
	target string
	addr   string

	fault atomic.Int32
	up    atomic.Int64 // latency client → node, in ns
	down  atomic.Int64 // latency node → client, in ns
	dial  atomic.Int64 // a new connection's set-up, in ns (see SetDialLatency)
	taken atomic.Int64 // connections accepted (see Accepted)

	mu     sync.Mutex
	ln     net.Listener // nil while refusing
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every pipe goroutine
}

// NewProxy starts a proxy on a free loopback port in front of target, and
// stops it when the test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{tb: tb, target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port, for the client.
func (p *Proxy) Addr() string { return p.addr }

// SetLatency delays each direction by the given amount (per chunk, order
// kept, without limiting throughput).
func (p *Proxy) SetLatency(up, down time.Duration) {
	p.up.Store(int64(up))
	p.down.Store(int64(down))
}

// SetDialLatency makes each new connection cost d before anything the
// client sends on it moves (its first bytes reach the node d after the
// connection was accepted, plus the latency up): a TCP handshake with a
// node one round trip d away, which a loopback connect does not cost.
func (p *Proxy) SetDialLatency(d time.Duration) { p.dial.Store(int64(d)) }

// Set switches the proxy to fault f.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	old := Fault(p.fault.Swap(int32(f)))
	refusing := func(f Fault) bool { return f == Refuse || f == DropRepliesRefusingNew }
	switch {
	case refusing(f) && !refusing(old):
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		if f == Refuse {
			p.cutLocked()
		}
	case !refusing(f) && refusing(old):
		if old == DropRepliesRefusingNew {
			p.cutLocked() // replies were dropped: the streams are out of step
		}
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			p.tb.Errorf("redistest: proxy re-listen on %s: %v", p.addr, err)
			return
		}
		p.serveLocked(ln)
	case old == DropReplies || old == Partition:
		// Bytes were dropped: the RESP streams of the open connections are
		// out of step. Cut them, as a real client would after its timeout.
		p.cutLocked()
	}
}

// Fault returns the current fault.
func (p *Proxy) Fault() Fault { return Fault(p.fault.Load()) }

// Heal removes the fault and the latency.
func (p *Proxy) Heal() {
	p.SetLatency(0, 0)
	p.SetDialLatency(0)
	p.Set(Healthy)
}

// Cut closes every open connection once; new ones are accepted as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

func (p *Proxy) cutLocked() {
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		p.cutLocked()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.handle(c, ln)
		}
	}()
}

// track registers a connection accepted on ln, or closes it when the proxy
// is closed or ln was closed since (a Set(Refuse) between Accept and here
// refuses it too: it cut the open ones, and this one was not yet open).
func (p *Proxy) track(c net.Conn, ln net.Listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.ln != ln {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	p.taken.Add(1)
	return true
}

// trackServer registers the node's side of client, or closes it when
// client was cut while the node was dialled.
func (p *Proxy) trackServer(server, client net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, open := p.conns[client]; p.closed || !open {
		_ = server.Close()
		return false
	}
	p.conns[server] = struct{}{}
	return true
}

// Accepted returns how many connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.taken.Load() }

func (p *Proxy) handle(client net.Conn, ln net.Listener) {
	if !p.track(client, ln) {
		return
	}
	// Under Partition the connection to the node is made, but nothing
	// passes over it until the fault is healed.
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.trackServer(server, client) {
		_ = client.Close()
		return
	}
	p.wg.Add(2)
	notBefore := time.Now().Add(time.Duration(p.dial.Load()))
	go p.pipe(client, server, &p.up, false, notBefore)
	go p.pipe(server, client, &p.down, true, time.Time{})
}

// chunk is data read at a time, to be written after the latency.
type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies src to dst, applying the fault and latency of its direction.
// A reader goroutine stamps chunks; this goroutine writes each one when its
// latency has passed, so that latency does not limit throughput.
func (p *Proxy) pipe(src, dst net.Conn, latency *atomic.Int64, reply bool, notBefore time.Time) {
	defer p.wg.Done()
	queue := make(chan chunk, 1024)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				switch Fault(p.fault.Load()) {
				case Partition:
					continue // dropped
				case DropReplies, DropRepliesRefusingNew:
					if reply {
						continue // the node answered; the answer is lost
					}
				}
				at := time.Now().Add(time.Duration(latency.Load()))
				if first := notBefore.Add(time.Duration(latency.Load())); at.Before(first) {
					at = first // the connection is still being set up
				}
				queue <- chunk{data: buf[:n], at: at}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		// A fault switched on while the chunk waited applies to it too.
		if f := Fault(p.fault.Load()); f == Partition || ((f == DropReplies || f == DropRepliesRefusingNew) && reply) {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	// One side is gone: end both, so that the other direction ends too.
	_ = src.Close()
	_ = dst.Close()
	for range queue { // let the reader finish
	}
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}
