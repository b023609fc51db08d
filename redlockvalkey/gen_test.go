package redlockvalkey_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// valkey.go and valkey_test.go are what gen.sh makes of
// redlockrueidis/rueidis.go and rueidis_test.go: the two adapters, and
// their tests, cannot drift apart.
func TestGenerated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if b, err := exec.Command("bash", "gen.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, b)
	}
	for _, f := range []string{"valkey.go", "valkey_test.go"} {
		want, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s is not what gen.sh makes of ../redlockrueidis: run bash gen.sh", f)
		}
	}
}
