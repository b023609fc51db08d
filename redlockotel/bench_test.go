package redlockotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/internal/redistest"
	"github.com/go-redlock/redlock/redlockotel"
)

// BenchmarkAcquireRelease measures Acquire+Release on 3 nodes without an
// observer and with the OpenTelemetry observer (SDK providers: spans
// sampled, metrics aggregated for a manual reader).
//
//	cd redlockotel && go test -run '^$' -bench . -benchmem
func BenchmarkAcquireRelease(b *testing.B) {
	obs, err := redlockotel.New(redlockotel.WithTracerProvider(sdktrace.NewTracerProvider()),
		redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))))
	if err != nil {
		b.Fatal(err)
	}
	f := redistest.New(b, redistest.Setup{Nodes: 3})
	for _, bc := range []struct {
		name string
		opts []redlock.Option
	}{{"none", nil}, {"otel", []redlock.Option{redlock.WithObserver(obs)}}} {
		b.Run(bc.name, func(b *testing.B) {
			rl, err := redlock.New(f.Clients, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer rl.Close()
			ctx := context.Background()
			keys := []string{"bench-otel"}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l, err := rl.Acquire(ctx, keys, 10*time.Second)
				if err != nil {
					b.Fatalf("Acquire = %v", err)
				}
				if _, err := l.Release(ctx); err != nil {
					b.Fatalf("Release = %v", err)
				}
			}
		})
	}
}
