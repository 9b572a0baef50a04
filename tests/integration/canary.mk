# tests/integration/canary.mk - canary releases (hyserve-ctl canary/promote/
# abort, nginx split_clients by API key id) and the model/hyserve versions in
# /v1/models and /health are tested end to end in tests/integration/test_ops.py,
# registered by ops.mk next to the blue/green switch they share nginx and both
# coordinators with; SHA-256 has its unit test in src/common/common.mk.  No
# canary file is installed: hyserve-ctl writes upstream-canary.conf at run time.
