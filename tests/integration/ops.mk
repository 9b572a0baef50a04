# tests/integration/ops.mk - operations: the production nginx site (nginx/),
# hyserve-ctl (API keys, blue/green switch, canary, status), the systemd unit,
# syslog-ng and logrotate files (etc/) and their end-to-end test, which runs
# a private TLS nginx in front of two coordinators (skips without nginx,
# openssl or cgi-fcgi).
dist_sbin_SCRIPTS = scripts/hyserve-ctl
hyservenginxdir = $(sysconfdir)/hyserve/nginx
dist_hyservenginx_DATA = nginx/hyserve.conf nginx/upstream-blue.conf nginx/upstream-green.conf
# test_bluegreen_models.py: the same switch between two different models,
# SmolLM2 on blue and Gemma 3 on green (its built-in chat template).
TESTS += tests/integration/test_ops.py tests/integration/test_bluegreen_models.py
EXTRA_DIST += tests/integration/test_ops.py tests/integration/test_bluegreen_models.py scripts/quickstart \
	etc/hyserve@.service etc/syslog-ng/hyserve.conf etc/logrotate.d/hyserve
# the documented default config, as /etc/hyserve/hyserve.ini (copy it to
# /etc/hyserve/<colour>.ini for hyserve@<colour>.service)
hyserveconfdir = $(sysconfdir)/hyserve
dist_hyserveconf_DATA = etc/hyserve.ini
EXTRA_DIST += packaging
# What a failure costs a client (docs/failures.md): a worker killed
# mid-stream aborts its responses (HTTP/1.1, HTTP/2, the openai client).
TESTS += tests/integration/test_failures.py
EXTRA_DIST += tests/integration/test_failures.py
# The master/engine split: kill -9 of the engine 5 times under 16 streams
# (every text unchanged, nothing leaked), of the master (no orphans), and a
# restart storm (errors, never a hang).  About 2-3 minutes on a busy machine.
TESTS += tests/integration/test_engine_restart.py
EXTRA_DIST += tests/integration/test_engine_restart.py
