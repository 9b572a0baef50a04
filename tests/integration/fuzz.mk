# tests/integration/fuzz.mk - (filled in by its owner)
