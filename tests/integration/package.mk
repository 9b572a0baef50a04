# tests/integration/package.mk - (filled in by its owner)
