"""How people and agents reach chorus: the CLI (`cli/`), the MCP server (`mcp`), `chorus
watch` (`watch`), the demo (`demo`), the worker's HTTP client (`worker_api`), channel
controls written to the log (`control`) and the driver-event client (`driver_events`)."""
