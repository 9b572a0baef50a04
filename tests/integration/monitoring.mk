# tests/integration/monitoring.mk - what operators watch: the Prometheus
# scrape config, alert rules (with their promtool unit tests) and Grafana
# dashboard of packaging/monitoring/, installed under
# $(pkgdatadir)/monitoring (the .deb and the .rpm ship them there);
# test_promtool.sh checks them with promtool (Debian package prometheus),
# test_metrics.py checks /metrics end to end behind the production nginx
# site (nginx's own refusals answered and counted, the exposition parsed by
# prometheus_client, every metric the rules and the dashboard read present,
# priorities overtaking a queue).  promql.py: the shipped expressions;
# sitelib.py: the production site under a temporary prefix.
hyservemonitoringdir = $(pkgdatadir)/monitoring
dist_hyservemonitoring_DATA = packaging/monitoring/prometheus.yml \
	packaging/monitoring/hyserve-rules.yml packaging/monitoring/hyserve-rules.test.yml \
	packaging/monitoring/grafana-hyserve.json
TESTS += tests/integration/test_promtool.sh tests/integration/test_metrics.py
EXTRA_DIST += tests/integration/test_promtool.sh tests/integration/test_metrics.py \
	tests/integration/promql.py tests/integration/sitelib.py
