"""Programs that use chorus through its public client (`streams.client`) only."""
