"""The harness: one run's settings, running ranks on a backend, budgets, the example database, results."""
