package redlocktest

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// fault is what a proxy does to the traffic it carries.
type fault int32

const (
	// healthy forwards every byte both ways.
	healthy fault = iota
	// down has no listener: a new connection is refused, as by a host
	// whose server crashed; the open ones were cut when it went down.
	down
	// hung accepts connections and reads what the client sends, but
	// nothing reaches the node and nothing comes back: a paused server,
	// or a partition that drops packets.
	hung
)

// proxy is a loopback TCP proxy in front of one miniredis node. Its address
// stays the same for its whole life, down or not, so that a client's
// address names the node. Its methods are safe for concurrent use.
type proxy struct {
	target string // the node's own address
	addr   string // the proxy's, which clients dial

	fault atomic.Int32 // read by the pipes at every chunk; written under mu

	mu     sync.Mutex
	ln     net.Listener // nil while down or closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every pipe
}

// newProxy starts a proxy on a free loopback port in front of target.
func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("redlocktest: a proxy's listener on 127.0.0.1: %w", err)
	}
	p := &proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.mu.Lock()
	p.serveLocked(ln)
	p.mu.Unlock()
	return p, nil
}

// set switches the proxy to f. Leaving down listens again on the same
// address; that can fail only if another socket took the port meanwhile,
// and the error says so. After close, set does nothing.
func (p *proxy) set(f fault) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	old := fault(p.fault.Load())
	if old == f {
		return nil
	}
	switch {
	case f == down:
		_ = p.ln.Close()
		p.ln = nil
		p.cutLocked()
	case old == down:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("listening again on %s, the node's address: %w", p.addr, err)
		}
		p.serveLocked(ln)
	case old == hung:
		// Bytes were dropped both ways: the streams of the open
		// connections are out of step. Cut them, as the client would after
		// its timeout, and as a healed partition's are.
		p.cutLocked()
	}
	p.fault.Store(int32(f))
	return nil
}

// cut closes every open connection; new ones are taken as before.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

func (p *proxy) cutLocked() {
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// close stops the proxy: its listener and every connection, and waits
// for its goroutines, which end at once (every socket they read is
// closed). It is idempotent.
func (p *proxy) close() {
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

// serveLocked accepts connections on ln until it is closed.
func (p *proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed: down, or the proxy's close
			}
			p.handle(c)
		}
	}()
}

// track records c as open, or closes it when the proxy is closed or went
// down since c was accepted (set's cut could not see it yet).
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || fault(p.fault.Load()) == down {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// handle connects client to the node and starts the two pipes. It runs on
// the accept loop, whose count in wg keeps wg.Add legal here.
func (p *proxy) handle(client net.Conn) {
	if !p.track(client) {
		return
	}
	// Every connection gets its own to the node, even while hung (the
	// bytes are dropped, not the connection): a node that comes back with
	// Heal has its connections cut, and the client opens new ones.
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		_ = client.Close() // the node itself is gone: the nodes are closing
		return
	}
	if !p.track(server) {
		_ = client.Close()
		return
	}
	p.wg.Add(2)
	go p.pipe(client, server)
	go p.pipe(server, client)
}

// pipe copies src to dst, dropping what it reads while the proxy hangs.
// When either side ends, it closes both, so the other pipe ends too.
func (p *proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		// Reading on while hung, rather than stopping, keeps the client's
		// writes from blocking: a hung node's kernel still takes the bytes.
		// Both ways are dropped: the requests never reach the node, and
		// what the node says after the hang began (an answer to a request
		// sent just before, a pub/sub message) never reaches the client.
		n, err := src.Read(buf)
		if n > 0 && fault(p.fault.Load()) != hung {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = src.Close()
	_ = dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}
