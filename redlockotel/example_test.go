package redlockotel_test

import (
	"log"
	"os"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlockotel"
)

// A Redlock whose calls are recorded as spans and metrics by the global
// TracerProvider and MeterProvider (set them up with the OpenTelemetry SDK
// first; redlockotel/example serves the metrics for Prometheus).
func ExampleNew() {
	obs, err := redlockotel.New()
	if err != nil {
		log.Fatal(err)
	}
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"), redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
}
