// Package metrics exposes Ratchet's Prometheus metrics: counters and
// latency histograms fed by the engine's and the proxy's observers, and
// gauges read from the ledger at scrape time (effects by state, ceiling
// utilisation, pending approvals), so they are right even across restarts.
//
// Effect types are chosen by agents, so their label is capped: after
// maxEffectTypes distinct values, new ones are counted as "other".
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

const maxEffectTypes = 200

// Ledger is what the scrape-time gauges read.
type Ledger interface {
	StateCounts(ctx context.Context) (map[ledger.State]int64, error)
	Budgets(ctx context.Context, namespace string) ([]ledger.Budget, error)
	ListApprovals(ctx context.Context, namespace, state string) ([]ledger.Approval, error)
}

// Metrics holds Ratchet's metrics and implements ledger.Observer and
// proxy.Observer.
type Metrics struct {
	reg        *prometheus.Registry
	decisions  *prometheus.CounterVec
	beginLat   prometheus.Histogram
	reports    *prometheus.CounterVec
	reportLat  prometheus.Histogram
	expired    prometheus.Counter
	failed     *prometheus.CounterVec
	proxyReqs  *prometheus.CounterVec
	upstream   *prometheus.HistogramVec
	notify     *prometheus.CounterVec
	dropped    *prometheus.CounterVec
	observed   *prometheus.CounterVec
	dimWarn    *prometheus.CounterVec
	ops        *prometheus.CounterVec
	webhooks   *prometheus.CounterVec // webhooks.Observer
	recovered  *prometheus.CounterVec // recovery.Observer
	idleClosed *prometheus.CounterVec // ConnState, once asked for

	mu    sync.Mutex
	types map[string]bool
}

var (
	_ ledger.Observer = (*Metrics)(nil)
	_ proxy.Observer  = (*Metrics)(nil)

	_ ledger.ObserveModeObserver      = (*Metrics)(nil)
	_ ledger.DimensionWarningObserver = (*Metrics)(nil)
	_ proxy.OperationObserver         = (*Metrics)(nil)
)

// New registers the metrics. Set the ledger with Watch before serving.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), types: map[string]bool{}}
	latency := prometheus.ExponentialBuckets(0.0001, 2, 16) // 100 µs … 3.3 s
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_decisions_total",
		Help: "Begin decisions by effect type and decision."}, []string{"effect_type", "decision"})
	m.beginLat = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ratchet_begin_duration_seconds",
		Help: "Time to a durable begin decision.", Buckets: latency})
	m.reports = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_reports_total",
		Help: "Reports by outcome."}, []string{"outcome"})
	m.reportLat = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ratchet_report_duration_seconds",
		Help: "Time to a durable report.", Buckets: latency})
	m.expired = prometheus.NewCounter(prometheus.CounterOpts{Name: "ratchet_reaper_expirations_total",
		Help: "Leases the background reaper found expired without a report."})
	m.failed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_ledger_write_failures_total",
		Help: "Ledger operations answered unavailable, by stage: commit (failed, nothing recorded), sync (failed, perhaps recorded), stopped (refused: a sync failed earlier and the engine takes no writes until restarted)."},
		[]string{"stage"})
	m.proxyReqs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_proxy_requests_total",
		Help: "Proxy requests by vendor and outcome (pass, a decision, or refused)."}, []string{"vendor", "outcome"})
	m.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ratchet_proxy_upstream_duration_seconds",
		Help: "Vendor call latency by vendor and classified result.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)},
		[]string{"vendor", "result"})
	m.notify = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_notify_deliveries_total",
		Help: "Notification delivery attempts by sink, event type and result: delivered, failed (tried again later) or dead (given up: a dead letter, see GET /v1/outbox?dead=true)."},
		[]string{"sink", "event_type", "result"})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_outbox_dropped_total",
		Help: "Dead letters dropped, oldest first, to keep a sink's outbox within notify.max_dead_letters: notifications lost for good (each drop is also an outbox.dropped event)."},
		[]string{"sink"})
	m.observed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_observed_total",
		Help: "Begins an observed policy rule (mode: observe) would have refused, by effect type and what it would have answered; the agent was answered as if the rule were absent."},
		[]string{"effect_type", "would"})
	m.reg.MustRegister(m.observed)
	m.dimWarn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_dimension_warnings_total",
		Help: "Begins answered with a dimension_warning, by effect type: a ceiling per dimension applied to the type but the begin declared none of its dimension, so it was not applied."},
		[]string{"effect_type"})
	m.ops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_proxy_operations_total",
		Help: "Gated proxy calls by the vendor's own operation (stripe.payment_intents.create) and decision; ratchet_decisions_total counts them by effect type (payment.charge)."},
		[]string{"operation", "decision"})
	m.reg.MustRegister(m.dimWarn, m.ops)
	m.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_webhook_events_total",
		Help: "Vendor webhook events by vendor and stage: received, refused (bad or stale signature), verified, ignored, matched, unknown (no effect has the key), settled, agreed (settled that way already), contradicted, failed (not recorded; the vendor retries)."},
		[]string{"vendor", "stage"})
	m.recovered = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_recoveries_total",
		Help: "Same-key recoveries by vendor and result: tried, settled, agreed, contradicted, unknown (tried again later), expired (the vendor's key window closed first), dropped (settled otherwise), unreadable."},
		[]string{"vendor", "result"})
	m.reg.MustRegister(m.webhooks, m.recovered)
	m.reg.MustRegister(m.decisions, m.beginLat, m.reports, m.reportLat, m.expired, m.failed, m.proxyReqs, m.upstream, m.notify, m.dropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Watch adds the scrape-time gauges read from l.
func (m *Metrics) Watch(l Ledger) {
	m.reg.MustRegister(&ledgerCollector{l: l})
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *Metrics) effectType(t string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.types[t] {
		if len(m.types) >= maxEffectTypes {
			return "other"
		}
		m.types[t] = true
	}
	return t
}

// Begin implements ledger.Observer.
func (m *Metrics) Begin(effectType string, d ledger.Decision, elapsed time.Duration) {
	m.decisions.WithLabelValues(m.effectType(effectType), string(d)).Inc()
	m.beginLat.Observe(elapsed.Seconds())
}

// Observed implements ledger.ObserveModeObserver.
func (m *Metrics) Observed(effectType, would string) {
	m.observed.WithLabelValues(m.effectType(effectType), would).Inc()
}

// DimensionWarning implements ledger.DimensionWarningObserver.
func (m *Metrics) DimensionWarning(effectType string, _ int) {
	m.dimWarn.WithLabelValues(m.effectType(effectType)).Inc()
}

// Operation implements proxy.OperationObserver.
func (m *Metrics) Operation(operation, decision string) {
	m.ops.WithLabelValues(m.effectType(operation), decision).Inc()
}

// Report implements ledger.Observer.
func (m *Metrics) Report(o ledger.Outcome, elapsed time.Duration) {
	m.reports.WithLabelValues(string(o)).Inc()
	m.reportLat.Observe(elapsed.Seconds())
}

// Expired implements ledger.Observer.
func (m *Metrics) Expired(n int) { m.expired.Add(float64(n)) }

// WriteFailed implements ledger.Observer.
func (m *Metrics) WriteFailed(stage string, ops int) {
	m.failed.WithLabelValues(stage).Add(float64(ops))
}

// Webhook implements webhooks.Observer.
func (m *Metrics) Webhook(vendor, stage string) { m.webhooks.WithLabelValues(vendor, stage).Inc() }

// Recovery implements recovery.Observer.
func (m *Metrics) Recovery(vendor, result string) { m.recovered.WithLabelValues(vendor, result).Inc() }

// Delivery implements notify.Observer.
func (m *Metrics) Delivery(sink, eventType, result string) {
	m.notify.WithLabelValues(sink, eventType, result).Inc()
}

// Outbox is what the outbox gauges read.
type Outbox interface {
	Outbox(ctx context.Context, deadOnly bool) ([]ledger.OutboxEntry, error)
}

// WatchOutbox adds the outbox gauges, read from o at scrape time:
// entries waiting for delivery and dead letters, by sink.
func (m *Metrics) WatchOutbox(o Outbox) {
	m.reg.MustRegister(&outboxCollector{o: o})
}

var outboxDesc = prometheus.NewDesc("ratchet_outbox_entries", "Notification events in the outbox by sink and status: waiting (to be delivered) or dead (given up).",
	[]string{"sink", "status"}, nil)

type outboxCollector struct{ o Outbox }

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- outboxDesc }

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all, err := c.o.Outbox(ctx, false)
	if err != nil {
		return
	}
	type k struct{ sink, status string }
	n := map[k]int{}
	for _, en := range all {
		st := "waiting"
		if en.Dead {
			st = "dead"
		}
		n[k{en.Sink, st}]++
	}
	for kk, v := range n {
		ch <- prometheus.MustNewConstMetric(outboxDesc, prometheus.GaugeValue, float64(v), kk.sink, kk.status)
	}
}

// Request implements proxy.Observer.
func (m *Metrics) Request(vendor, outcome string) { m.proxyReqs.WithLabelValues(vendor, outcome).Inc() }

// Upstream implements proxy.Observer.
func (m *Metrics) Upstream(vendor, result string, elapsed time.Duration) {
	m.upstream.WithLabelValues(vendor, result).Observe(elapsed.Seconds())
}

// ledgerCollector reads gauges from the ledger at scrape time.
type ledgerCollector struct{ l Ledger }

var (
	effectsDesc = prometheus.NewDesc("ratchet_effects", "Stored effects by state.", []string{"state"}, nil)
	ceilingDesc = prometheus.NewDesc("ratchet_ceiling_utilisation_ratio", "Counted over limit of each live ceiling counter.",
		[]string{"namespace", "ceiling", "per"}, nil)
	approvalsDesc = prometheus.NewDesc("ratchet_approvals_pending", "Approval requests waiting for an operator.", nil, nil)
	scrapeErrDesc = prometheus.NewDesc("ratchet_ledger_scrape_error", "1 if the ledger could not be read for this scrape.", nil, nil)
)

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- effectsDesc
	ch <- ceilingDesc
	ch <- approvalsDesc
	ch <- scrapeErrDesc
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := 0.0
	if counts, err := c.l.StateCounts(ctx); err == nil {
		for state, n := range counts {
			ch <- prometheus.MustNewConstMetric(effectsDesc, prometheus.GaugeValue, float64(n), string(state))
		}
	} else {
		failed = 1
	}
	if budgets, err := c.l.Budgets(ctx, ""); err == nil {
		// Several scopes share a ceiling (per agent, per dimension): the
		// gauge shows the fullest one.
		type k struct{ ns, name, per string }
		worst := map[k]float64{}
		for _, b := range budgets {
			ratio := 1.0
			if b.Limit > 0 {
				ratio = float64(b.Counted) / float64(b.Limit)
			}
			kk := k{b.Namespace, b.Name, b.Per}
			worst[kk] = max(worst[kk], ratio)
		}
		for kk, r := range worst {
			ch <- prometheus.MustNewConstMetric(ceilingDesc, prometheus.GaugeValue, r, kk.ns, kk.name, kk.per)
		}
	} else {
		failed = 1
	}
	if pending, err := c.l.ListApprovals(ctx, "", ledger.ApprovalPending); err == nil {
		ch <- prometheus.MustNewConstMetric(approvalsDesc, prometheus.GaugeValue, float64(len(pending)))
	} else {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, failed)
}
