// Package demo gives the example programs their Redis nodes: the ones named
// on the command line, or embedded in-process nodes when none are, so that
// every example runs on a machine with no Redis at all.
package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Clients returns one go-redis client per address in addrList (host:port,
// comma-separated) or, when addrList is empty, per one of n embedded nodes it
// starts. close closes the clients and stops the embedded nodes.
func Clients(addrList string, n int) (clients []redis.UniversalClient, close func(), err error) {
	var stops []func()
	close = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	var addrs []string
	if addrList == "" {
		for range n {
			mr := miniredis.NewMiniRedis()
			if err := mr.Start(); err != nil {
				close()
				return nil, nil, fmt.Errorf("starting an embedded node: %w", err)
			}
			stops = append(stops, mr.Close, followClock(mr))
			addrs = append(addrs, mr.Addr())
		}
		fmt.Printf("using %d embedded nodes: %s\n", n, strings.Join(addrs, " "))
	} else {
		addrs = strings.Split(addrList, ",")
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(a)})
		stops = append(stops, func() { _ = c.Close() })
		clients = append(clients, c)
	}
	return clients, close, nil
}

// followClock makes an embedded node's keys expire in real time (miniredis's
// clock only moves when told to) and returns the function that stops it.
func followClock(mr *miniredis.Miniredis) func() {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				mr.FastForward(10 * time.Millisecond)
			}
		}
	}()
	return func() { close(stop); <-done }
}
