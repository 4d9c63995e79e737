"""Sparkplug B 3.0 upstream: codec, mapping of records to metrics, session and forwarder."""
