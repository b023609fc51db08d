package flight

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Wait's channel is closed when the count reaches zero, at once when it is
// zero already, and not before.
func TestWait(t *testing.T) {
	var f Flight
	select {
	case <-f.Wait():
	default:
		t.Fatal("an idle Flight is waited for")
	}
	f.Add()
	f.Add()
	w := f.Wait()
	f.Done()
	select {
	case <-w:
		t.Fatal("closed with one left")
	case <-time.After(10 * time.Millisecond):
	}
	f.Done()
	select {
	case <-w:
	case <-time.After(time.Second):
		t.Fatal("not closed at zero")
	}
	assert.False(t, f.Stopped())
	f.Stop()
	assert.True(t, f.Stopped())
}

// Goroutines that start and end concurrently with a waiter never leave it
// waiting once they are all done.
func TestWaitRace(t *testing.T) {
	var f Flight
	for range 100 {
		f.Add()
		go f.Done()
	}
	select {
	case <-f.Wait():
	case <-time.After(5 * time.Second):
		t.Fatal("a Done was lost")
	}
}
