"""The worker: a runtime the stages share (`runtime`), the stages (`stages/`), and the one
place that wires them (`compose.build_worker`); `run` starts it."""
