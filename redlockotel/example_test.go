package redlockotel_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlockotel"
)

// A Redlock whose calls are recorded as spans and metrics. Here the
// OpenTelemetry SDK's providers keep them in memory, to print them; a
// program gives providers with its exporters, or no option for the global
// TracerProvider and MeterProvider (redlockotel/example serves the metrics
// for Prometheus).
func ExampleNew() {
	reader := sdkmetric.NewManualReader() // in a program: a Prometheus or OTLP exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	obs, err := redlockotel.New(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}
	rl, err := redlock.Open(os.Getenv("REDLOCK_NODES"), redlock.WithObserver(obs)) // such as 10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	ctx := context.Background()

	lock, err := rl.Acquire(ctx, []string{"invoice:42"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// ... the critical section ...
	if _, err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}

	for _, s := range spans.Ended() {
		fmt.Println("span:", s.Name())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Println("metric:", name)
	}
	// Output:
	// span: redlock.acquire
	// span: redlock.release
	// metric: redlock.acquire.attempts
	// metric: redlock.lock.hold.duration
	// metric: redlock.locks.lost
	// metric: redlock.operation.duration
	// metric: redlock.operations
	// metric: redlock.waits
}
