package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// run and elect record the host, the process id and the command's name as
// the lock's identity; a command whose name is long or unprintable still
// runs, its name cut.
func TestRunRecordsItsJob(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	dir := t.TempDir()
	odd := filepath.Join(dir, strings.Repeat("long-job-name-", 8)+"\x01")
	require.NoError(t, os.WriteFile(odd, []byte("#!/bin/sh\nsleep 30\n"), 0o755))
	for _, tc := range []struct {
		argv []string
		job  string
	}{
		{[]string{"run", "job", "--", "sleep", "30"}, " sleep"},
		{[]string{"run", "odd", "--", odd}, " long-job-name-long-job-n"},
		{[]string{"elect", "leader-job", "--", "sleep", "30"}, " sleep"},
	} {
		cmd := c.command(tc.argv...)
		require.NoError(t, cmd.Start())
		res := tc.argv[1]
		if tc.argv[0] == "elect" {
			res = "redlock:election:" + res
		}
		var id string
		require.Eventually(t, func() bool {
			_, ins := c.statusJSON(t, res)
			if len(ins) != 1 || len(ins[0].Holders) == 0 {
				return false
			}
			id = ins[0].Holders[0].Identity
			return true
		}, 10*time.Second, 20*time.Millisecond, "%v holds %s", tc.argv, res)
		assert.True(t, strings.HasSuffix(id, "/"+strconv.Itoa(cmd.Process.Pid)+tc.job), "%v: identity %q", tc.argv, id)
		host, _ := os.Hostname()
		assert.True(t, strings.HasPrefix(id, host), "%v: identity %q", tc.argv, id)
		terminate(t, cmd)
	}
}
