"""The running service: recorder, forwarders, status, metrics, sd_notify, logging, the stop.
Wires sources, store and sinks together; holds no SQL and no protocol of its own.
"""
