"""From a run's trace to metrics, SLA scores and results (pure functions of the trace)."""
