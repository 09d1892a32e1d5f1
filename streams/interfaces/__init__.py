"""How people and agents reach chorus: the CLI (`cli/`), the MCP server (`mcp`), `chorus
watch` (`watch`), the demo (`demo`), the worker's HTTP client (`worker_api`), the
compacted topics read and written directly (`control`: the fallback when no worker
answers, channel controls) and the driver-event client (`driver_events`)."""
