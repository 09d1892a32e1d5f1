"""What agents taking part share, below the worker's agent API and the MCP server: who an
agent is over HTTP (`identity`: the agent its bearer token names) and sending as an agent
(`sending`: a message built without a sender field, validated by the fold's rules and
refused before it is sent when the channel's writers leave the agent out)."""
