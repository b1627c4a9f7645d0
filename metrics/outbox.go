package metrics

// Dropped implements notify.DropObserver: the outbox's bound dropped n of
// sink's oldest dead letters (notify.max_dead_letters). An operator pages
// on any increase of ratchet_outbox_dropped_total: notifications were lost
// for good.
func (m *Metrics) Dropped(sink string, n int) {
	m.dropped.WithLabelValues(sink).Add(float64(n))
}
