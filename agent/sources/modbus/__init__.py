"""Modbus TCP/RTU source: read planning, decoding, answer checks and the poller."""
