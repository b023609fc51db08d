// Package redlockotel records what a redlock.Redlock does as OpenTelemetry
// spans and metrics. It is a module of its own, so that the library itself
// pulls in nothing of OpenTelemetry:
//
//	go get github.com/go-redlock/redlock/redlockotel  # Go 1.24 or later, OpenTelemetry v1.41 or later
//
//	obs, err := redlockotel.New() // the global TracerProvider and MeterProvider
//	rl, err := redlock.New(clients, redlock.WithObserver(obs))
//
// Spans: one per Acquire, Extend, Release and Using ("redlock.acquire", ...),
// a child of the span in the caller's ctx, with the attempts, the votes of
// the last attempt, the outcome and a fenced lock's token as attributes.
// They are recorded when the call returns, with its real start and end
// times; the engine batches the calls of many callers into one pipeline per
// node, so go-redis's own command spans (redisotel) are not their children.
//
// # Metrics
//
// Durations are in seconds, and every point has db.system.name=redis. The
// attributes: redlock.operation (acquire, extend, release), redlock.outcome
// (redlock.Outcome's values: ok, contention, expired, canceled, invalid,
// node_failure), redlock.node (a node's address, host:port, never a
// password), error.type, redlock.lost and redlock.woken.
//
//   - redlock.operation.duration (histogram; operation, outcome): how long
//     Acquire (the wait for the lock included), Extend and Release took.
//     Acquire's is the wait for the lock: alert on its upper percentiles
//     for ok.
//   - redlock.operations (counter; operation, outcome): the calls. A rising
//     node_failure rate means a quorum is hard to reach: page; contention
//     is normal, up to what your design expects.
//   - redlock.acquire.attempts (histogram; outcome): attempts per Acquire.
//     Many mean heavy contention or sick nodes.
//   - redlock.attempt.votes_against (counter; operation, node, error.type:
//     held, gone, timeout, circuit_open, replica_ack, canceled, error): each
//     node's votes against. One node's timeout, circuit_open or error
//     rising: that node is sick before the quorum is.
//   - redlock.lock.hold.duration (histogram; lost): from the grant to the
//     release, or to the loss. How long critical sections hold their locks:
//     compare with the ttl.
//   - redlock.locks.lost (counter): locks found lost, by an Extend that
//     found the lock gone or by Using, which could not keep it. Any
//     increase: a critical section may have run without its lock to the
//     end: page.
//   - redlock.waits (counter; woken): pauses between attempts, ended by a
//     release announcement (woken) or by the retry delay.
//
// The series of redlock.operations (every operation and outcome),
// redlock.locks.lost and redlock.waits exist at zero from the start, so
// that an alert on any increase sees the first event. With
// WithResourceAttribute (whose values are not known before), and for votes
// against (labelled by node), a series appears with its first event.
// Resource names are not attributes (they are unbounded) unless
// WithResourceAttribute maps them to a bounded set, such as their prefix.
//
// # Prometheus
//
// Use OpenTelemetry's Prometheus exporter rather than a second
// instrumentation. The program in redlockotel/example is a service whose
// workers contend for three locks and which serves /metrics that way:
//
//	cd redlockotel/example && go run .
//	curl -s localhost:2112/metrics | grep redlock_
//
// There the names follow the exporter's rules:
// redlock_operations_total{redlock_operation="acquire",redlock_outcome="ok",...},
// redlock_attempt_votes_against_total{error_type="held",redlock_node="127.0.0.1:6379",...},
// and so on.
//
// otel_test.go checks, with the SDK's in-memory span recorder and a manual
// metric reader on real nodes, the spans and metrics of a scripted run: a
// held lock, a contended try-lock, a hung minority node, a lock lost under
// Using. What the observer costs: benchmarks/README.md in the repository.
package redlockotel

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-redlock/redlock"
)

// scope is the instrumentation scope's name.
const scope = "github.com/go-redlock/redlock/redlockotel"

// Option changes how New records.
type Option func(*config)

type config struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	resource func([]string) string
}

// WithTracerProvider sets the TracerProvider (default: otel's global one).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the MeterProvider (default: otel's global one).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithResourceAttribute adds the attribute redlock.resource, f(resources),
// to every span and metric point. f must map the resources to a small,
// bounded set of values (a metric gets one series per value), such as
// their prefix before ':'.
func WithResourceAttribute(f func(resources []string) string) Option {
	return func(c *config) { c.resource = f }
}

// recorder holds the instruments.
type recorder struct {
	cfg      config
	tracer   trace.Tracer
	duration metric.Float64Histogram
	calls    metric.Int64Counter
	attempts metric.Int64Histogram
	against  metric.Int64Counter
	hold     metric.Float64Histogram
	lost     metric.Int64Counter
	waits    metric.Int64Counter
}

var dbSystem = attribute.String("db.system.name", "redis")

// New returns an Observer that records spans and metrics; give it to
// redlock.New or a call with redlock.WithObserver.
func New(opts ...Option) (*redlock.Observer, error) {
	r := &recorder{}
	for _, o := range opts {
		o(&r.cfg)
	}
	if r.cfg.tp == nil {
		r.cfg.tp = otel.GetTracerProvider()
	}
	if r.cfg.mp == nil {
		r.cfg.mp = otel.GetMeterProvider()
	}
	r.tracer = r.cfg.tp.Tracer(scope)
	m := r.cfg.mp.Meter(scope)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	r.duration, err = m.Float64Histogram("redlock.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("How long Acquire (waiting for the lock included), Extend and Release took"),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	add(err)
	r.calls, err = m.Int64Counter("redlock.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Acquire, Extend and Release calls, by outcome"))
	add(err)
	r.attempts, err = m.Int64Histogram("redlock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts per Acquire"), metric.WithExplicitBucketBoundaries(1, 2, 3, 5, 10, 20, 50))
	add(err)
	r.against, err = m.Int64Counter("redlock.attempt.votes_against", metric.WithUnit("{vote}"),
		metric.WithDescription("Votes against, by node and reason"))
	add(err)
	r.hold, err = m.Float64Histogram("redlock.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, from the grant to the release"),
		metric.WithExplicitBucketBoundaries(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800))
	add(err)
	r.lost, err = m.Int64Counter("redlock.locks.lost", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks found lost: an Extend that found the lock gone, or Using's lock that could not be extended while fn ran"))
	add(err)
	r.waits, err = m.Int64Counter("redlock.waits", metric.WithUnit("{wait}"),
		metric.WithDescription("Pauses between attempts, by what ended them"))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.zeros()
	return &redlock.Observer{
		Done:     r.done,
		Vote:     r.vote,
		Wait:     r.wait,
		Lost:     r.lostLock,
		Released: r.released,
		Using:    r.using,
	}, nil
}

// zeros creates the counters' series at zero, so that an alert on "any
// increase" sees the first lost lock, the first contention and the first
// node failure: a series that appears with its first event has no increase
// to see. (Series labelled by a resource, with WithResourceAttribute, and by
// node, for votes against, appear with their first event: their labels are
// not known before.)
func (r *recorder) zeros() {
	if r.cfg.resource != nil {
		return
	}
	ctx := context.Background()
	for _, op := range []redlock.Op{redlock.OpAcquire, redlock.OpExtend, redlock.OpRelease} {
		for _, o := range []redlock.Outcome{redlock.OutcomeOK, redlock.OutcomeContention, redlock.OutcomeExpired,
			redlock.OutcomeCanceled, redlock.OutcomeInvalid, redlock.OutcomeNodeFailure} {
			r.calls.Add(ctx, 0, metric.WithAttributes(dbSystem, attribute.String("redlock.operation", string(op)), attribute.String("redlock.outcome", string(o))))
		}
	}
	r.lost.Add(ctx, 0, metric.WithAttributes(dbSystem))
	for _, woken := range []bool{false, true} {
		r.waits.Add(ctx, 0, metric.WithAttributes(dbSystem, attribute.Bool("redlock.woken", woken)))
	}
}

// attrs returns the attributes every point and span gets.
func (r *recorder) attrs(resources []string, more ...attribute.KeyValue) []attribute.KeyValue {
	kv := append([]attribute.KeyValue{dbSystem}, more...)
	if r.cfg.resource != nil {
		kv = append(kv, attribute.String("redlock.resource", r.cfg.resource(resources)))
	}
	return kv
}

func (r *recorder) done(c redlock.CallInfo) {
	ctx := ctxOf(c.Ctx)
	kv := r.attrs(c.Resources, attribute.String("redlock.operation", string(c.Op)), attribute.String("redlock.outcome", string(c.Outcome)))
	set := metric.WithAttributes(kv...)
	r.duration.Record(ctx, c.Took.Seconds(), set)
	r.calls.Add(ctx, 1, set)
	if c.Op == redlock.OpAcquire && c.Tries > 0 {
		r.attempts.Record(ctx, int64(c.Tries), metric.WithAttributes(r.attrs(c.Resources, attribute.String("redlock.outcome", string(c.Outcome)))...))
	}

	spanKV := append(kv, attribute.Int("redlock.attempts", c.Tries), attribute.Int("redlock.resources.count", len(c.Resources)))
	if n := len(c.Attempts); n > 0 {
		last := c.Attempts[n-1]
		spanKV = append(spanKV, attribute.Int("redlock.votes.for", len(last.VotesFor)), attribute.Int("redlock.votes.against", len(last.VotesAgainst)),
			attribute.Int("redlock.nodes", last.MembershipSize), attribute.Int("redlock.quorum", last.QuorumSize))
	}
	if c.Token != 0 {
		spanKV = append(spanKV, attribute.Int64("redlock.token", int64(c.Token)))
	}
	_, span := r.tracer.Start(ctx, "redlock."+string(c.Op), trace.WithTimestamp(c.Start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(spanKV...))
	if c.Err != nil {
		span.SetAttributes(attribute.String("error.type", string(c.Outcome)))
		span.SetStatus(codes.Error, c.Err.Error())
	}
	span.End(trace.WithTimestamp(c.Start.Add(c.Took)))
}

func (r *recorder) vote(e *redlock.NodeError) {
	r.against.Add(context.Background(), 1, metric.WithAttributes(dbSystem, attribute.String("redlock.operation", string(e.Op)),
		attribute.String("redlock.node", nodeName(e)), attribute.String("error.type", errorType(e.Err))))
}

func (r *recorder) wait(w redlock.WaitInfo) {
	r.waits.Add(context.Background(), 1, metric.WithAttributes(r.attrs(w.Resources, attribute.Bool("redlock.woken", w.Woken))...))
}

func (r *recorder) lostLock(l redlock.LostInfo) {
	r.lost.Add(ctxOf(l.Ctx), 1, metric.WithAttributes(r.attrs(l.Resources)...))
	r.hold.Record(ctxOf(l.Ctx), l.Held.Seconds(), metric.WithAttributes(r.attrs(l.Resources, attribute.Bool("redlock.lost", true))...))
}

func (r *recorder) released(rel redlock.ReleasedInfo) {
	r.hold.Record(context.Background(), rel.Held.Seconds(), metric.WithAttributes(r.attrs(rel.Resources, attribute.Bool("redlock.lost", false))...))
}

func (r *recorder) using(u redlock.UsingInfo) {
	ctx := ctxOf(u.Ctx)
	kv := r.attrs(u.Resources, attribute.Bool("redlock.ran", u.Ran), attribute.Bool("redlock.lost", u.Lost))
	_, span := r.tracer.Start(ctx, "redlock.using", trace.WithTimestamp(u.Start), trace.WithAttributes(kv...))
	if u.Err != nil {
		span.SetStatus(codes.Error, u.Err.Error())
	}
	span.End(trace.WithTimestamp(u.Start.Add(u.Took)))
}

// errorType names a vote against's reason in a few values.
func errorType(err error) string {
	var rle *redlock.ResourceLockedError
	var nte *redlock.NodeTimeoutError
	var rae *redlock.ReplicaAckError
	switch {
	case errors.As(err, &rle):
		if rle.Op == redlock.OpAcquire {
			return "held"
		}
		return "gone"
	case errors.As(err, &nte):
		if nte.CircuitOpen {
			return "circuit_open"
		}
		return "timeout"
	case errors.As(err, &rae):
		return "replica_ack"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

func ctxOf(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// nodeName is the redlock.node attribute: the node's address (NodeError.Addr:
// never a password), or its index when the address is not known.
func nodeName(e *redlock.NodeError) string {
	if e.Addr != "" {
		return e.Addr
	}
	return strconv.Itoa(e.Node)
}
