package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// ServerDirEnv names the environment variable that points the real-node
// tests at another server build: a directory holding redis-server and
// redis-cli (../shared/servers/redis-6.2, say; Valkey's binaries under
// those names). Unset or empty: redis-server and redis-cli on PATH.
const ServerDirEnv = "REDISTEST_SERVER_DIR"

// Binary is the redis-server executable the nodes run, and CLI the
// redis-cli that creates Clusters: in $REDISTEST_SERVER_DIR when it is set.
var (
	Binary = tool("redis-server")
	CLI    = tool("redis-cli")
)

func tool(name string) string {
	if dir := os.Getenv(ServerDirEnv); dir != "" {
		return filepath.Join(dir, name)
	}
	return name
}

// Server is the server that Binary runs, as its --version says.
type Server struct {
	Name                string // "Redis" or "Valkey"
	Major, Minor, Patch int
}

func (s Server) String() string { return fmt.Sprintf("%s %d.%d.%d", s.Name, s.Major, s.Minor, s.Patch) }

// AtLeast reports whether s is Redis major.minor or later. Valkey, forked
// from Redis 7.2.4, has every command of Redis 7.2.
func (s Server) AtLeast(major, minor int) bool {
	if s.Name == "Valkey" {
		return major < 7 || major == 7 && minor <= 2
	}
	return s.Major > major || s.Major == major && s.Minor >= minor
}

// version asks Binary its version once.
var version = sync.OnceValues(func() (Server, error) {
	out, err := exec.Command(Binary, "--version").Output()
	if err != nil {
		return Server{}, fmt.Errorf("%s --version: %v", Binary, err)
	}
	return parseVersion(string(out))
})

// parseVersion reads "Redis server v=7.2.6 sha=..." or "Valkey server
// v=8.0.1 ...".
func parseVersion(out string) (Server, error) {
	f := strings.Fields(out)
	if len(f) < 3 || !strings.HasPrefix(f[2], "v=") {
		return Server{}, fmt.Errorf("%s --version: unexpected answer %q", Binary, out)
	}
	s := Server{Name: f[0]}
	parts := strings.SplitN(strings.TrimPrefix(f[2], "v="), ".", 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return Server{}, fmt.Errorf("%s --version: unexpected version %q", Binary, f[2])
		}
		*[]*int{&s.Major, &s.Minor, &s.Patch}[i] = n
	}
	return s, nil
}

// Version returns the server the nodes run; it fails tb when Binary cannot
// say.
func Version(tb testing.TB) Server {
	tb.Helper()
	Require(tb)
	s, err := version()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return s
}

// ByDesign skips tb, saying so, when the server is older than Redis
// major.minor and so lacks what the test exercises (lacks: "sharded pub/sub
// (SPUBLISH)"): the library refuses or degrades there by design, and
// TestCompatibility checks what it does instead.
func ByDesign(tb testing.TB, major, minor int, lacks string) {
	tb.Helper()
	if s := Version(tb); !s.AtLeast(major, minor) {
		tb.Skipf("by design: %s has no %s (Redis %d.%d); TestCompatibility checks what a user gets there", s, lacks, major, minor)
	}
}
