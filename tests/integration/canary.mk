# tests/integration/canary.mk - (filled in by its owner)
