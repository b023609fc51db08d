// Command example is a service whose workers contend for a few locks, with
// redlock's OpenTelemetry metrics served for Prometheus on /metrics.
//
//	go run .                       # 3 embedded nodes, metrics on :2112
//	go run . -addrs h1:6379,h2:6379,h3:6379 -listen :2112
//	curl -s localhost:2112/metrics | grep redlock_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/go-redlock/redlock"
	"github.com/go-redlock/redlock/redlockotel"
)

func main() {
	addrs := flag.String("addrs", "", "comma-separated host:port of independent Redis nodes (default: 3 embedded nodes)")
	listen := flag.String("listen", ":2112", "where to serve /metrics")
	workers := flag.Int("workers", 8, "workers contending for the locks")
	flag.Parse()
	if err := run(*addrs, *listen, *workers); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(addrList, listen string, workers int) error {
	// OpenTelemetry metrics, exported in Prometheus's format.
	exporter, err := promexporter.New()
	if err != nil {
		return err
	}
	// The service's name goes on every metric (target_info, and the
	// job label when scraped), not unknown_service.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "redlock-example")))
	if err != nil {
		return err
	}
	// No resource label (WithResourceAttribute): then every counter's
	// series exists at zero from the start, and an alert on its first
	// increase sees the first lost lock.
	obs, err := redlockotel.New(redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))))
	if err != nil {
		return err
	}

	if addrList == "" {
		for range 3 {
			mr, err := miniredis.Run()
			if err != nil {
				return err
			}
			defer mr.Close()
			addrList += mr.Addr() + ","
		}
		addrList = strings.TrimSuffix(addrList, ",")
	}
	rl, err := redlock.Open(addrList, redlock.WithObserver(obs))
	if err != nil {
		return err
	}
	defer rl.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for w := range workers {
		go func() {
			for ctx.Err() == nil {
				job := fmt.Sprintf("job:%d", rand.IntN(3))
				err := rl.Using(ctx, []string{job}, 2*time.Second, func(ctx context.Context) error {
					time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond) // the work
					return nil
				}, redlock.WithRetryCount(5))
				if err != nil && !errors.Is(err, redlock.ErrResourceLocked) && ctx.Err() == nil {
					log.Printf("worker %d: %v", w, err)
				}
			}
		}()
	}
	http.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Addr: listen}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	host := listen
	if strings.HasPrefix(host, ":") {
		host = "localhost" + host
	}
	log.Printf("%d workers contending for 3 locks; metrics on http://%s/metrics", workers, host)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
