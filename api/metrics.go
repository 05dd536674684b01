package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/turnstile/turnstile/projections"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	feeds    prometheus.Gauge
	handler  http.Handler
}

func newMetrics(reg *prometheus.Registry, queries *projections.Queries) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_http_requests_total", Help: "HTTP requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "turnstile_http_request_duration_seconds", Help: "HTTP request latency by route (feeds: the whole connection).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		feeds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "turnstile_feed_clients", Help: "Open SSE feed connections."}),
	}
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "turnstile_projection_lag_seconds",
		Help:    "Time from an event's commit to the read model applying it (the first event of each batch the read model applies).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	queries.Views().ObserveLag(func(d time.Duration) { lag.Observe(d.Seconds()) })
	reg.MustRegister(m.requests, m.latency, m.feeds, lag, &viewsCollector{queries: queries})
	_ = reg.Register(collectors.NewGoCollector())
	_ = reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) observe(route, method string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	s.metrics.handler.ServeHTTP(w, r)
}

// viewsCollector exports the read model's figures at scrape time.
type viewsCollector struct {
	queries *projections.Queries
}

var (
	descQueueLength = prometheus.NewDesc("turnstile_queue_length", "Executions waiting in an action's queue.", []string{"action"}, nil)
	descActive      = prometheus.NewDesc("turnstile_active_executions", "Executions of an action granted a slot and not ended.", []string{"action"}, nil)
	descLimit       = prometheus.NewDesc("turnstile_max_concurrent", "An action's concurrency limit.", []string{"action"}, nil)
	descEnqueued    = prometheus.NewDesc("turnstile_enqueued_total", "Executions admitted to an action's queue.", []string{"action"}, nil)
	descGrants      = prometheus.NewDesc("turnstile_grants_total", "Slots granted.", []string{"action"}, nil)
	descEnded       = prometheus.NewDesc("turnstile_executions_ended_total", "Executions ended, by outcome.", []string{"action", "outcome"}, nil)
	descWaitP95     = prometheus.NewDesc("turnstile_queue_wait_p95_seconds", "95th percentile of the last 1024 waits for a slot.", []string{"action"}, nil)
	descPosition    = prometheus.NewDesc("turnstile_projection_position", "Next log position the read model will apply.", nil, nil)
	descLag         = prometheus.NewDesc("turnstile_projection_lag_events", "Events committed to the log and not yet in the read model.", nil, nil)
	descResInUse    = prometheus.NewDesc("turnstile_resource_in_use", "Units of a resource held, across its key values.", []string{"resource"}, nil)
	descResWaiting  = prometheus.NewDesc("turnstile_resource_waiting", "Executions waiting in the queues of the actions that need a resource.", []string{"resource"}, nil)
	descResLimit    = prometheus.NewDesc("turnstile_resource_max_concurrent", "A resource's max_concurrent (per key value where keyed; absent without one).", []string{"resource"}, nil)
	descSkipped     = prometheus.NewDesc("turnstile_projection_skipped_events_total", "Events the read model passed over because they did not decode (the audit lists them).", nil, nil)
)

func (c *viewsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueLength, descActive, descLimit, descEnqueued, descGrants, descEnded, descWaitP95, descPosition, descLag, descSkipped, descResInUse, descResWaiting, descResLimit} {
		ch <- d
	}
}

func (c *viewsCollector) Collect(ch chan<- prometheus.Metric) {
	views := c.queries.Views()
	for _, st := range views.AllStats() {
		a := st.Action
		ch <- prometheus.MustNewConstMetric(descQueueLength, prometheus.GaugeValue, float64(st.QueueLength), a)
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(st.ActiveCount), a)
		ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(st.MaxConcurrent), a)
		ch <- prometheus.MustNewConstMetric(descEnqueued, prometheus.CounterValue, float64(st.TotalEnqueued), a)
		ch <- prometheus.MustNewConstMetric(descGrants, prometheus.CounterValue, float64(st.TotalGranted), a)
		for outcome, n := range map[string]uint64{"completed": st.TotalCompleted, "failed": st.TotalFailed, "timed_out": st.TotalTimedOut,
			"rejected": st.TotalRejected, "cancelled": st.TotalCancelled} {
			ch <- prometheus.MustNewConstMetric(descEnded, prometheus.CounterValue, float64(n), a, outcome)
		}
		ch <- prometheus.MustNewConstMetric(descWaitP95, prometheus.GaugeValue, st.WaitP95Ms/1000, a)
	}
	for _, r := range views.Resources() {
		ch <- prometheus.MustNewConstMetric(descResInUse, prometheus.GaugeValue, float64(r.InUse), r.Name)
		ch <- prometheus.MustNewConstMetric(descResWaiting, prometheus.GaugeValue, float64(r.Waiting), r.Name)
		if r.Limit.MaxConcurrent > 0 {
			ch <- prometheus.MustNewConstMetric(descResLimit, prometheus.GaugeValue, float64(r.Limit.MaxConcurrent), r.Name)
		}
	}
	next := views.Next()
	ch <- prometheus.MustNewConstMetric(descPosition, prometheus.GaugeValue, float64(next))
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(views.Skipped()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if head, err := c.queries.Head(ctx); err == nil {
		lag := 0.0
		if head > next {
			lag = float64(head - next)
		}
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, lag)
	}
}
