package metrics

import (
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Sessions and connections (issue 32.2): how many MCP sessions are open,
// and how many of a listener's connections were closed while idle (by
// the listener's idle timeout, or by a client that went away between
// requests). Both are what an operator watches for agents that vanish.

// WatchSessions adds the gauge of open MCP sessions, counted by open at
// each scrape.
func (m *Metrics) WatchSessions(open func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratchet_mcp_sessions",
		Help: "MCP sessions open (an idle one is closed after the session idle timeout)."},
		func() float64 { return float64(open()) }))
}

// ConnState returns an http.Server ConnState hook that counts, under
// listener, the connections closed while idle.
func (m *Metrics) ConnState(listener string) func(net.Conn, http.ConnState) {
	m.mu.Lock()
	if m.idleClosed == nil {
		m.idleClosed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratchet_http_idle_connections_closed_total",
			Help: "Connections closed between requests, by listener: the idle timeout, or a client that went away."}, []string{"listener"})
		m.reg.MustRegister(m.idleClosed)
	}
	c := m.idleClosed.WithLabelValues(listener)
	m.mu.Unlock()
	var idle sync.Map // net.Conn → struct{}: conns now idle
	return func(conn net.Conn, s http.ConnState) {
		switch s {
		case http.StateIdle:
			idle.Store(conn, struct{}{})
		case http.StateActive:
			idle.Delete(conn)
		case http.StateClosed, http.StateHijacked:
			if _, was := idle.LoadAndDelete(conn); was && s == http.StateClosed {
				c.Inc()
			}
		}
	}
}
