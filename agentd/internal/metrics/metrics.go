// Package metrics is agentd's Prometheus metrics, served on its own small
// HTTP listener (--metrics-listen). Every name starts blendplane_; labels
// are bounded (tool names, statuses, states — never ids).
package metrics

import (
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	cpv1 "github.com/blendplane/blendplane/gen/blendplane/controlplane/v1"
)

// Source is what the gauges read at each scrape.
type Source interface {
	// JournalCommits counts the journal's durable commits.
	JournalCommits() uint64
	// Blenders lists the process ids of the sessions' running Blenders.
	Blenders() []int
	// SessionCounts counts the sessions whose Blender runs (live) and the others.
	SessionCounts() (live, parked int)
	// Spares counts the Blenders started ahead of their sessions, ready;
	// Adopted the starts that took one.
	Spares() int
	Adopted() uint64
	// Refreshed counts the sessions given a fresh Blender that loaded their
	// checkpoint.
	Refreshed() uint64
}

// Metrics holds agentd's collectors.
type Metrics struct {
	reg        *prometheus.Registry
	operations *prometheus.CounterVec
	bridge     *prometheus.HistogramVec
}

// New registers agentd's metrics, reading src at each scrape.
func New(src Source) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.operations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "blendplane_agent_operations_total",
		Help: "Operations whose receipt this agent journaled and sent, by tool and status."}, []string{"tool", "status"})
	m.bridge = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "blendplane_bridge_duration_seconds",
		Help:    "Time an operation took in Blender, through the bridge, by tool.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 4, 10)}, []string{"tool"})
	commits := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "blendplane_journal_commits_total",
		Help: "Durable commits of the journal (bbolt transactions)."}, func() float64 { return float64(src.JournalCommits()) })
	// bbolt makes a commit durable with two fdatasyncs: the data pages,
	// then the meta page.
	fsyncs := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "blendplane_journal_fsyncs_total",
		Help: "fdatasync calls of the journal (two per commit)."}, func() float64 { return 2 * float64(src.JournalCommits()) })
	processes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "blendplane_blender_processes",
		Help: "Blender processes running for sessions."}, func() float64 { return float64(len(src.Blenders())) })
	memory := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "blendplane_blender_memory_bytes",
		Help: "Resident memory of the sessions' Blender processes together."}, func() float64 {
		total := 0
		for _, pid := range src.Blenders() {
			total += rss(pid)
		}
		return float64(total)
	})
	spares := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "blendplane_blender_spares",
		Help: "Blender processes started ahead of their sessions, ready to be adopted (each holds a slot)."}, func() float64 { return float64(src.Spares()) })
	adopted := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "blendplane_blender_spares_adopted_total",
		Help: "Blender starts (sessions, restores, recoveries, previews) that adopted a spare instead of starting one."}, func() float64 { return float64(src.Adopted()) })
	sessions := prometheus.NewDesc("blendplane_agent_sessions", "Sessions this agent holds, by whether their Blender runs.", []string{"state"}, nil)
	refreshed := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "blendplane_sessions_refreshed_total",
		Help: "Sessions given a fresh Blender (a spare) that loaded their checkpoint, after their Blender changed --refresh-after of the scene's records."}, func() float64 { return float64(src.Refreshed()) })
	m.reg.MustRegister(m.operations, m.bridge, commits, fsyncs, processes, spares, adopted, refreshed, memory, sessionGauge{src, sessions},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "blendplane_agentd"}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Receipt counts a receipt the agent sent. Nil-safe.
func (m *Metrics) Receipt(r *cpv1.Receipt) {
	if m == nil {
		return
	}
	status := strings.ToLower(strings.TrimPrefix(r.GetStatus().String(), "STATUS_"))
	m.operations.WithLabelValues(r.GetToolName(), status).Inc()
	if r.GetStatus() == cpv1.Receipt_STATUS_SUCCEEDED && r.GetDurationMicros() > 0 {
		m.bridge.WithLabelValues(r.GetToolName()).Observe(float64(r.GetDurationMicros()) / 1e6)
	}
}

type sessionGauge struct {
	src  Source
	desc *prometheus.Desc
}

func (g sessionGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g sessionGauge) Collect(ch chan<- prometheus.Metric) {
	live, parked := g.src.SessionCounts()
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(live), "live")
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(parked), "parked")
}

// rss is a process's resident memory in bytes (0 if it is gone).
func rss(pid int) int {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.Atoi(f[1])
	return pages * os.Getpagesize()
}
