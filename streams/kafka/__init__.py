"""Kafka clients: connection options and client factories (`clients`), reading a topic
(`consume`) and producing messages (`produce`)."""
