"""Upstream sinks (MQTT, HTTP): publish outbox records and report delivered / retry / rejected."""
