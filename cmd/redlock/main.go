// Command redlock runs a job under a Redlock lock held on several independent
// Redis nodes, from a shell, cron, a systemd timer or a Kubernetes CronJob,
// and shows who holds a lock; and runs a command while its candidate leads
// an election, and shows who leads.
//
//	redlock run [flags] RESOURCE[,RESOURCE...] -- COMMAND [ARG...]
//	redlock status [flags] RESOURCE...
//	redlock ls [flags] [PATTERN]
//	redlock hold [flags] RESOURCE[,RESOURCE...]
//	redlock release [flags] RESOURCE [--value VALUE]...
//	redlock elect [flags] NAME -- COMMAND [ARG...]
//	redlock leader [flags] NAME
//	redlock help [VERB]
//
// Install it with
//
//	go install github.com/go-redlock/redlock/cmd/redlock@latest
//
// The exit codes of run: the command's own (128+n when a signal n killed
// it); 75 when the lock is held by another when the wait ended, a run of
// another kind (another --permits, --shared) included (--conflict-exit-code
// changes it); 69 when the nodes are unreachable or refuse the lock; 79
// when the lock was lost while the command ran; 128+n when signal n ended
// the wait, before the command started; 2 for a usage error; 126 and 127
// when the command cannot be run or is not found. `redlock help run` says
// more.
//
// elect exits as run does, the term taking the lock's place (75: the wait
// ended without leading, 79: the term was lost; with --forever, 0 once a
// signal stopped it); leader exits 0 when someone leads, 1 when a quorum
// answered and nobody does, 69 when too few nodes answered to tell, 2 for
// a usage error. `redlock help elect` and `redlock help leader` say more.
//
// status, likewise, exits 0 when every resource is held, 1 when one is free
// (and none unknown), 69 when one is unknown (too few nodes answered to
// tell), 2 for a usage error; ls exits 0 when a lock is listed, 1 when
// none is held, 69 when the list may miss a lock held on a quorum or
// lists one unknown, 2 for a usage error; hold exits 0 once SIGINT or SIGTERM made it
// release the lock, 75 on a conflict, 69 when the nodes are unreachable,
// 79 when the lock was lost while held, 128+n when signal n ended the
// wait, 2 for a usage error; release exits 0 when every node answered, 1
// when none held a --value given, 69 when some did not answer (it says
// whether a quorum did), 2 for a usage error; version and help exit 0, or
// 2 for a usage error.
//
// The command's own exit code may be one of redlock's (sh -c 'exit 75'
// exits 75 as a run that found the lock held does). To tell them apart:
// give --report to run or elect, and the last line redlock prints on
// stderr says whose code it is, "redlock run: exit 75 (command)" or
// "redlock run: exit 75 (conflict)" (the kinds: command, conflict,
// unavailable, lost, signal, stopped, cannot-run, not-found, usage); or
// move the conflict's code out of the command's way with
// --conflict-exit-code (0 makes a skipped run a success, as systemd and
// cron want it: then a command that exits 75 is a failure again). Without
// --report, redlock says nothing of its own when the command ran and
// exited, when the lock was held (a skipped run is quiet, for cron), or
// when a signal ended the wait; every other code of its own comes with a
// line on stderr.
//
// No message shows the password of a node URL: the user information of
// every node given (by --nodes or REDLOCK_NODES) is masked wherever it
// appears, as given, percent-decoded or re-encoded, quoted, or in the
// pieces a URL parser cuts it into; and the command does not get
// REDLOCK_NODES in its environment.
package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// The exit codes, besides the command's own.
const (
	exitUsage       = 2   // a bad invocation: the usage is on stderr
	exitUnavailable = 69  // no quorum for reasons other than contention (EX_UNAVAILABLE)
	exitConflict    = 75  // held by another, and the wait ended (EX_TEMPFAIL: try again later)
	exitLost        = 79  // the lock was lost while the command ran
	exitCannotRun   = 126 // the command was found but could not be started
	exitNotFound    = 127 // the command was not found
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// cli runs one invocation and returns its exit code. Whatever redlock
// itself prints goes through redact: no message, log line or JSON field
// shows a password from a node URL (the command's own output does not pass
// here).
func cli(args []string, stdout, stderr io.Writer) int {
	learnSecrets(os.Getenv("REDLOCK_NODES"), args)
	stdout, stderr = redacting{stdout}, redacting{stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usageTop)
		return exitUsage
	}
	switch verb, rest := args[0], args[1:]; verb {
	case "run":
		return runVerb(rest, stdout, stderr)
	case "status":
		return statusVerb(rest, stdout, stderr)
	case "ls":
		return lsVerb(rest, stdout, stderr)
	case "hold":
		return holdVerb(rest, stdout, stderr)
	case "release":
		return releaseVerb(rest, stdout, stderr)
	case "elect":
		return electVerb(rest, stdout, stderr)
	case "leader":
		return leaderVerb(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return helpVerb(rest, stdout, stderr)
	case "version", "--version", "-version":
		return versionVerb(rest, stdout, stderr)
	case watchVerbName:
		return watchVerb()
	case gateVerbName:
		return gateVerb(rest)
	default:
		fmt.Fprintf(stderr, "redlock: unknown verb %q\nRun 'redlock help' for usage.\n", verb)
		return exitUsage
	}
}

func helpVerb(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usageTop)
		return 0
	}
	switch args[0] {
	case "run":
		fs, _ := runFlagSet(stdout)
		fs.Usage()
	case "status":
		fs, _ := statusFlagSet(stdout)
		fs.Usage()
	case "ls":
		fs, _ := lsFlagSet(stdout)
		fs.Usage()
	case "hold":
		fs, _ := holdFlagSet(stdout)
		fs.Usage()
	case "release":
		fs, _, _, _ := releaseFlagSet(stdout)
		fs.Usage()
	case "elect":
		fs, _ := electFlagSet(stdout)
		fs.Usage()
	case "leader":
		fs, _, _, _ := leaderFlagSet(stdout)
		fs.Usage()
	case "help":
		fmt.Fprint(stdout, usageTop)
	case "version":
		fmt.Fprint(stdout, usageVersion)
	default:
		fmt.Fprintf(stderr, "redlock: no help for unknown verb %q\nRun 'redlock help' for usage.\n", args[0])
		return exitUsage
	}
	return 0
}

const usageTop = `redlock runs a command under a lock held on a majority of independent Redis nodes,
or while leading an election held on them.

Usage:
  redlock run [flags] RESOURCE[,RESOURCE...] -- COMMAND [ARG...]
  redlock status [flags] RESOURCE...
  redlock ls [flags] [PATTERN]
  redlock hold [flags] RESOURCE[,RESOURCE...]
  redlock release [flags] RESOURCE [--value VALUE]...
  redlock elect [flags] NAME -- COMMAND [ARG...]
  redlock leader [flags] NAME
  redlock help [VERB]
  redlock version

Verbs:
  run      acquire the lock, run the command while extending the lock, release it
  status   show who holds each resource (any kind), with identity, ttl, token, waiters
  ls       list every lock held on the nodes (matching PATTERN): resource, kind, holder, ttl, state
  hold     acquire the lock and hold it, without a command, until SIGTERM or SIGINT
  release  force-release a resource: from every holder, or from the values given
  elect    campaign in an election, run the command while leading, resign
  leader   show who leads an election and its term, or follow the terms (--watch)
  help     show this, or a verb's flags and exit codes (exit 0; 2 for an unknown verb)
  version  show the version of redlock and of Go it was built with (exit 0; 2 for a usage error)

Durations are seconds (5, 0.5) or Go durations (30s, 1m30s, 500ms).

The nodes come from --nodes or REDLOCK_NODES: comma-separated host:port or
redis:// / rediss:// URLs (user, password, db, TLS), one per independent node.
Run "redlock help VERB" for a verb's exit codes.
`

const usageRun = `Usage: redlock run [flags] RESOURCE[,RESOURCE...] -- COMMAND [ARG...]

Acquires a lock on the resources (all or none) on a majority of the nodes,
runs COMMAND in its own process group while extending the lock, and releases
the lock when the command exits. The command gets REDLOCK_RESOURCES
(comma-separated), REDLOCK_VALUE (the lock's random value) and, with
--fencing, REDLOCK_TOKEN in its environment; not REDLOCK_NODES, whose
passwords stay with redlock.

With --permits N, the run takes one of N permits of each resource instead: at
most N runs of the resource at once, across every host (a semaphore that keeps
its bound while a minority of nodes fails). With --shared, it takes a shared
(read) lock: shared runs go side by side, and an exclusive run waits for them
all (no new shared run starts while one waits). Every run of a resource must
use the same kind: one that finds another kind holding it (a different
--permits, --shared against --permits) is a conflict, as when it is held.

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to redlock are passed to the
command's process group; redlock waits for the command, then releases the lock.

Lost lock: when the lock is lost while the command runs (another holder took it
after it expired, or the nodes stopped answering), the command's process group
gets SIGTERM at once, and SIGKILL --kill-grace later, and redlock exits 79.
Extensions are tried when half the ttl is left and retried while the lock is
valid; if they keep failing, the SIGTERM goes out --kill-grace + ttl/10 before
the lock would expire, so that with the default --kill-grace (ttl/4) the
SIGKILL lands before the lock's validity ends.

If redlock itself is killed (SIGKILL, the OOM killer), the command's process
group is killed with it: on Linux the kernel sends the command SIGKILL at once,
and a small watcher process kills the rest of its group. Only a process that
left the group (setsid) can outlive redlock.

Waiting: by default (--wait 0) a run that finds the lock held exits 75 at once,
where flock, consul lock and etcdctl lock wait. redlock is made for jobs that
many replicas or cron start at once, where "another one runs it" means "skip":
waiting by default would run the job again after the first one, once per
replica. Give --wait 5m (or forever) to queue behind the holder. A wait
always makes one whole attempt, however short (--wait 0.001): it ends in a
conflict (75) when the lock is held, never in a timeout.

Exit codes:
  the command's own   it ran and exited (128+n when signal n killed it)
  75                  the lock is held by another when --wait ended, or held by a run of another
                      kind (another --permits, --shared): one line says which (--conflict-exit-code)
  69                  the nodes are unreachable or refuse the lock (no quorum, not contention)
  79                  the lock was lost while the command ran
  128+n               signal n ended the wait for the lock, before the command started
  2                   usage error
  126, 127            the command could not be started, or was not found

The command's own code may be one of these (sh -c 'exit 75'). With --report,
redlock's last line on stderr says whose code it is: "redlock run: exit N
(KIND)", KIND being command, conflict, unavailable, lost, signal, cannot-run,
not-found or usage (once the flags are read: a flag that does not parse is
said by the flag's own error). Or give --conflict-exit-code a code the
command does not use: 0 makes a skipped run a success (systemd, cron), and
leaves 75 to the command. Without --report, a run that finds the lock held,
or that a signal stops while it waits, exits quietly; redlock's other codes
come with a line on stderr.

Flags:
`

const usageElect = `Usage: redlock elect [flags] NAME -- COMMAND [ARG...]

Campaigns in the election NAME as --id (default: the hostname), and runs
COMMAND while leading: at most one candidate of an election leads at a time,
on a majority of the nodes. The command runs in its own process group with
REDLOCK_ELECTION (NAME), REDLOCK_ID (the id) and REDLOCK_TERM (the term's
number, a fencing token greater than every earlier term's) in its
environment, and not REDLOCK_NODES. When it exits, redlock resigns, so
that a waiting candidate leads at once, and exits with the command's code.
"redlock leader NAME" shows who leads.

As with "redlock run": SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed to the
command's process group; if redlock is killed (SIGKILL, the OOM killer), the
command's group is killed with it; and when the term is lost while the
command runs (its key taken or deleted, or the nodes stopped answering while
extensions were retried), the group gets SIGTERM at once and SIGKILL
--kill-grace later, early enough for the SIGKILL to land before the term's
validity ends, and redlock exits 79. The term is extended when half the ttl
is left.

--forever: when the command exits or the term is lost, redlock resigns and
campaigns again (the command starts at most once a second), until SIGINT,
SIGTERM or SIGQUIT. That signal is passed to a running command; once it has
exited, redlock resigns and exits 0: being told to stop is a service's
normal end, and 0 is what systemd and Kubernetes count as a clean stop.
SIGHUP is passed to a running command and does not stop redlock.

Waiting: by default (--wait forever) elect campaigns until it leads, where
run tries once: a candidate stands by to take over when the leader resigns,
is lost or dies, and standing by is the point of an election; a candidate
that gave up would leave none. --wait 5m gives up after 5 minutes (each
campaign, with --forever), --wait 0 after one attempt (exit 75); a wait
always makes one whole attempt, however short. The default --ttl is 15s, not run's 30s: a
leader that dies without resigning (SIGKILL of the whole pod) is replaced
once its term expires.

Exit codes:
  the command's own   it ran and exited (128+n when signal n killed it)
  0                   with --forever: a signal stopped redlock
  75                  another candidate leads and --wait ended (--conflict-exit-code)
  69                  the nodes are unreachable or refuse the term (no quorum, not contention)
  79                  the term was lost while the command ran (--forever campaigns again)
  128+n               signal n ended the campaign, before the command started (not with --forever)
  2                   usage error
  126, 127            the command could not be started, or was not found

The command's own code may be one of these. With --report, redlock's last
line on stderr says whose code it is: "redlock elect: exit N (KIND)", KIND
being command, conflict, unavailable, lost, signal, stopped (--forever),
cannot-run, not-found or usage.

Flags:
`

const usageLeader = `Usage: redlock leader [flags] NAME

Prints who leads the election NAME, as a majority of the nodes holds it: the
leader's id and its term, "pod-a (term 7)", or {"id":"pod-a","term":7} with
--json; "no leader" ({"id":null,"term":null}) when nobody does. With --watch,
it prints that, then a line for each new term as it starts, until SIGINT or
SIGTERM (a term that starts and ends between two reads may be missed; a
leader that goes away without a successor prints nothing).

Exit codes (grep's: 0 found, 1 not):
  0    someone leads; with --watch, a signal stopped it
  1    nobody leads: a majority of the nodes answered, and no candidate leads on a majority
  69   too few nodes answered to tell
  2    usage error

Flags:
`

const usageVersion = `Usage: redlock version

Prints the version of redlock and of Go it was built with.

Exit codes:
  0    printed
  2    usage error (it takes no arguments)
`

// versionVerb prints the version; it takes no arguments but -h.
func versionVerb(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprintln(stdout, version())
		return 0
	case len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		fmt.Fprint(stdout, usageVersion)
		return 0
	}
	fmt.Fprintf(stderr, "redlock version: takes no arguments, got %q\nRun 'redlock help version' for usage.\n", args)
	return exitUsage
}

// redacting is a writer that removes URL credentials from what it writes.
// redlock writes each message, log record or JSON document in one Write.
type redacting struct{ w io.Writer }

func (r redacting) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// version is the module's version and the Go release redlock was built with.
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return "redlock " + v + " (" + runtime.Version() + ")"
}

// plain is err's text for a person at a shell: without the library's
// "redlock: " prefix (the command says its own), with the library's Go
// names in command-line terms (flags, node URLs: see commandWords), and
// with "clients[i]" as the node was given (redacted) when nodes are.
func plain(err error, nodes ...node) string {
	s := commandWords.Replace(strings.ReplaceAll(err.Error(), "redlock: ", ""))
	s = permitsOption.ReplaceAllString(s, "--permits $1")
	return clientIndex.ReplaceAllStringFunc(s, func(c string) string {
		i, err := strconv.Atoi(clientIndex.FindStringSubmatch(c)[1])
		if err != nil || i >= len(nodes) {
			return c
		}
		return fmt.Sprintf("node %q", nodes[i].given)
	})
}

// commandWords turns the library's words for its options and its clients'
// settings into what a redlock user sets: flags, and the node's URL.
var commandWords = strings.NewReplacer(
	"set Password (and Username, for an ACL user) in the client's options",
	"give it in the node's URL: redis://:PASSWORD@host:6379 (redis://USER:PASSWORD@host:6379 for an ACL user)",
	"the client's Username or Password is wrong for this node, or the user is disabled",
	"authentication failed: the user or password in the node's URL is wrong for this node, or the user is disabled",
	"the client's ACL user", "the ACL user of the node's URL",
	"the client's DialTimeout", "the dial timeout (the URL's dial_timeout, default 5s)",
	"WithNodeTimeout", "--node-timeout",
	"within the node timeout ", "within --node-timeout ",
	"give New one client per independent server", "give each independent server once in the node list",
	"WithPermits(n)", "--permits",
	"WithShared(true)", "--shared",
	"WithFencing(true)", "--fencing",
	"WithFencing", "--fencing",
)

// permitsOption is the library's WithPermits(n) with a number.
var permitsOption = regexp.MustCompile(`WithPermits\((\d+)\)`)

// clientIndex is the library's name for the i-th client given to New: the
// i-th node.
var clientIndex = regexp.MustCompile(`clients\[(\d+)\]`)
