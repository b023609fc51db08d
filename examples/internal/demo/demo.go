// Package demo gives the example programs their Redis nodes: the ones named
// on the command line, or embedded in-process nodes when none are, so that
// every example runs on a machine with no Redis at all.
package demo

import (
	"fmt"
	"strings"

	"github.com/go-redlock/redlock/redlocktest"
)

// Nodes returns the node list for redlock.Open: addrList as given
// (host:port or redis:// URLs, comma-separated) or, when it is empty, the
// addresses of n embedded nodes that it starts (redlocktest's in-memory
// nodes, whose keys expire in real time). stop stops them.
func Nodes(addrList string, n int) (list string, stop func(), err error) {
	if addrList != "" {
		return addrList, func() {}, nil
	}
	nodes, err := redlocktest.Start(n)
	if err != nil {
		return "", nil, fmt.Errorf("starting the embedded nodes: %w", err)
	}
	fmt.Printf("using %d embedded nodes: %s\n", n, strings.ReplaceAll(nodes.List(), ",", " "))
	return nodes.List(), nodes.Close, nil
}
