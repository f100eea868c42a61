// Package metrics is the control plane's Prometheus metrics, served at
// /metrics on --http-listen (admin scope). Every name starts blendplane_;
// labels are bounded (tool names, statuses, states — never ids).
package metrics

import (
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Source is what the gauges read at each scrape.
type Source interface {
	// SessionStates counts sessions by state ("open", "parked", "closed", "broken").
	SessionStates() map[string]int
	// PendingApprovals counts the approvals nobody has decided yet.
	PendingApprovals() int
	// ActivePlans counts the plans not finished (queued, running, waiting).
	ActivePlans() int
	// AgentStates counts the known agents by state ("ready", "unreachable",
	// "lost") and tells how long the most silent one has not been heard from.
	AgentStates() (map[string]int, time.Duration)
}

// Metrics holds the control plane's collectors.
type Metrics struct {
	reg        *prometheus.Registry
	operations *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	plans      *prometheus.CounterVec
	receipts   prometheus.Counter
	heartbeats prometheus.Counter
	moves      prometheus.Counter
}

// New registers the control plane's metrics (and the Go runtime's).
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.operations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "blendplane_operations_total",
		Help: "Operations whose receipt was committed, by tool and status."}, []string{"tool", "status"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "blendplane_operation_duration_seconds",
		Help:    "Time an operation took in its agent (the receipt's duration), by tool.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 4, 10)}, []string{"tool"})
	m.plans = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "blendplane_plans_finished_total",
		Help: "Plans that ended, by final state."}, []string{"state"})
	m.receipts = prometheus.NewCounter(prometheus.CounterOpts{Name: "blendplane_receipts_committed_total",
		Help: "Receipts committed to the control plane's store."})
	m.heartbeats = prometheus.NewCounter(prometheus.CounterOpts{Name: "blendplane_agent_heartbeats_total",
		Help: "Agent registrations and heartbeats received."})
	m.moves = prometheus.NewCounter(prometheus.CounterOpts{Name: "blendplane_session_moves_total",
		Help: "Sessions placed on another agent because theirs was lost."})
	m.reg.MustRegister(m.operations, m.duration, m.plans, m.receipts, m.heartbeats, m.moves,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "blendplane_controlplane"}))
	return m
}

// Watch adds the gauges that read src at each scrape.
func (m *Metrics) Watch(src Source) {
	m.reg.MustRegister(&gauges{src: src,
		sessions:  prometheus.NewDesc("blendplane_sessions", "Sessions by state.", []string{"state"}, nil),
		approvals: prometheus.NewDesc("blendplane_approvals_pending", "Approvals waiting for a decision.", nil, nil),
		active:    prometheus.NewDesc("blendplane_plans_active", "Plans not finished: queued, running or waiting for approval.", nil, nil),
		agents:    prometheus.NewDesc("blendplane_agents", "Known agents by state.", []string{"state"}, nil),
		lastSeen:  prometheus.NewDesc("blendplane_agent_heartbeat_age_seconds_max", "The longest time since a known agent's last heartbeat.", nil, nil),
	})
}

// CountCommits adds the store's durable commits (bbolt transactions, each
// two fdatasyncs), read at each scrape: with receipts_committed_total, how
// well receipts share them.
func (m *Metrics) CountCommits(commits func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "blendplane_store_commits_total",
		Help: "Durable commits of the control plane's store (bbolt transactions)."}, func() float64 { return float64(commits()) }))
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Committed counts receipts just committed for a plan, and the plan's end
// when plan is terminal now. Nil-safe.
func (m *Metrics) Committed(plan *cpv1.Plan, receipts []*cpv1.Receipt, ended bool) {
	if m == nil {
		return
	}
	m.receipts.Add(float64(len(receipts)))
	// A commit's receipts are mostly of one tool and status: one label
	// lookup per run of them, not per receipt.
	for i := 0; i < len(receipts); {
		tool, status := receipts[i].GetToolName(), receipts[i].GetStatus()
		j := i
		for j < len(receipts) && receipts[j].GetToolName() == tool && receipts[j].GetStatus() == status {
			j++
		}
		m.operations.WithLabelValues(tool, short(status.String())).Add(float64(j - i))
		var duration prometheus.Observer
		for _, r := range receipts[i:j] {
			if r.GetDurationMicros() > 0 {
				if duration == nil {
					duration = m.duration.WithLabelValues(tool)
				}
				duration.Observe(float64(r.GetDurationMicros()) / 1e6)
			}
		}
		i = j
	}
	if ended {
		m.plans.WithLabelValues(short(plan.GetState().String())).Inc()
	}
}

// Heartbeat counts an agent's registration. Nil-safe.
func (m *Metrics) Heartbeat() {
	if m != nil {
		m.heartbeats.Inc()
	}
}

// Moved counts a session placed elsewhere. Nil-safe.
func (m *Metrics) Moved() {
	if m != nil {
		m.moves.Inc()
	}
}

// short is an enum value without its prefix, lower case: STATUS_SUCCEEDED
// → succeeded.
func short(s string) string {
	_, v, ok := strings.Cut(s, "_")
	if !ok {
		v = s
	}
	return strings.ToLower(v)
}

type gauges struct {
	src                                           Source
	sessions, approvals, active, agents, lastSeen *prometheus.Desc
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.sessions, g.approvals, g.active, g.agents, g.lastSeen} {
		ch <- d
	}
}

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	states := g.src.SessionStates()
	for _, st := range []string{"open", "parked", "closed", "broken"} {
		ch <- prometheus.MustNewConstMetric(g.sessions, prometheus.GaugeValue, float64(states[st]), st)
	}
	ch <- prometheus.MustNewConstMetric(g.approvals, prometheus.GaugeValue, float64(g.src.PendingApprovals()))
	ch <- prometheus.MustNewConstMetric(g.active, prometheus.GaugeValue, float64(g.src.ActivePlans()))
	byState, silence := g.src.AgentStates()
	for _, st := range []string{"ready", "unreachable", "lost"} {
		ch <- prometheus.MustNewConstMetric(g.agents, prometheus.GaugeValue, float64(byState[st]), st)
	}
	ch <- prometheus.MustNewConstMetric(g.lastSeen, prometheus.GaugeValue, silence.Seconds())
}
