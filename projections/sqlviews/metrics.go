package sqlviews

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descPosition = prometheus.NewDesc("turnstile_sql_views_position",
		"Committed checkpoint of the PostgreSQL read model tables: the log positions below it are in them.", nil, nil)
	descLag = prometheus.NewDesc("turnstile_sql_views_lag_events",
		"Events committed to the log and not yet in the PostgreSQL read model tables.", nil, nil)
	descActive = prometheus.NewDesc("turnstile_sql_views_active",
		"1 if this process's projector writes the PostgreSQL read model tables, 0 if it is a standby.", nil, nil)
)

// Collector exports, at scrape time, the tables' committed checkpoint (read
// from the database, so standbys report it too), their lag behind the log's
// head, and whether this projector is the active one.
func (p *Projector) Collector() prometheus.Collector { return collector{p} }

type collector struct{ p *Projector }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPosition
	ch <- descLag
	ch <- descActive
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	active := 0.0
	if c.p.Active() {
		active = 1
	}
	ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, active)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	lag, cp, err := c.p.Lag(ctx)
	if err != nil {
		return // a scrape must not fail: the figures are just missing this time
	}
	ch <- prometheus.MustNewConstMetric(descPosition, prometheus.GaugeValue, float64(cp))
	ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(lag))
}

// Lag returns how many events of the log are not yet in the tables, and
// their committed checkpoint.
func (p *Projector) Lag(ctx context.Context) (lag, checkpoint uint64, err error) {
	checkpoint, err = Checkpoint(ctx, p.pool, p.opts)
	if err != nil {
		return 0, 0, err
	}
	head, err := p.store.Head(ctx)
	if err != nil {
		return 0, 0, err
	}
	if head > checkpoint {
		lag = head - checkpoint
	}
	return lag, checkpoint, nil
}
