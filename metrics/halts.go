package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Halts is what the halts gauge reads.
type Halts interface {
	ListHalts(ctx context.Context) ([]ledger.Halt, error)
}

// WatchHalts adds ratchet_halts_active, read from h at scrape time: a halt
// is a decision, not a fault, so it shows here and never in /readyz.
func (m *Metrics) WatchHalts(h Halts) {
	m.reg.MustRegister(&haltsCollector{h: h})
}

var haltsDesc = prometheus.NewDesc("ratchet_halts_active", "Active operator halts (ratchet halts lists them); begins in their scopes are denied with reason halted.", nil, nil)

type haltsCollector struct{ h Halts }

func (c *haltsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- haltsDesc }

func (c *haltsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if hs, err := c.h.ListHalts(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(haltsDesc, prometheus.GaugeValue, float64(len(hs)))
	}
}
