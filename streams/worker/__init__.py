"""The worker: a runtime the stages share (`runtime`), the stages (`stages/`), and the one
place that wires them (`compose.build_worker`, per role: fold or context); `run` starts one
role, `supervise` both as child processes (`chorus worker`)."""
