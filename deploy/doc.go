// Package deploy holds no Go code: it is the home of shield's operator
// files and of the tests that keep them honest.
//
//	grafana/shield-dashboard.json   Grafana dashboard (schemaVersion 39)
//	prometheus/alerts.yml           alert rules with runbooks
//	prometheus/alerts_test.yml      promtool unit tests of those rules
//	prometheus/prometheus.yml       example scrape configuration
//
// Invariants the tests enforce (go test ./deploy/):
//   - every metric name in a dashboard expression, a dashboard variable
//     query or an alert rule is one a real shield exports: the tests build
//     cmd/shield and cmd/demo-origin, start both on free 127.0.0.1 ports,
//     drive a miss, a hit, a 429 and a purge, and read /metrics. A
//     histogram is queried through its _bucket/_sum/_count series, so a
//     bare family name is refused. Prometheus's own `up` is the one name
//     allowed in alerts that shield does not export;
//   - the dashboard is valid JSON with a datasource, an instance and a
//     route variable and the panels operators rely on;
//   - promtool accepts the rules (check rules), their unit tests pass
//     (test rules), the example config is valid (check config), and the
//     shield_ families of the real scrape pass `promtool check metrics`.
//     Only shield_ families are linted: the go_ and process_ families are
//     written by VictoriaMetrics/metrics, whose names shield does not
//     choose.
//
// Tests that need promtool fail when it is missing (.ci/run installs the
// Debian package prometheus), except under -short, where they skip.
package deploy
