"""The randomized checker of the guarantees at every intersection (docs/guarantees.md): a seed draws a scenario
(`scenario`), the harness runs it against a real PostgreSQL through the sink's own steps (`harness`), and the
model (`model`) says what the table, the dead letters and the offsets must hold. `make test` runs fixed seeds
(tests/integration/test_checker.py); `make soak SECONDS=3600` runs new ones until the time is up (`soak`)."""
