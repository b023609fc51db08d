package redlockvalkey_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// valkey.go is what gen.sh makes of redlockrueidis/rueidis.go: the two
// adapters cannot drift apart.
func TestGenerated(t *testing.T) {
	out := filepath.Join(t.TempDir(), "valkey.go")
	if b, err := exec.Command("bash", "gen.sh", out).CombinedOutput(); err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("valkey.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("valkey.go is not what gen.sh makes of ../redlockrueidis/rueidis.go: run bash gen.sh")
	}
}
