"""The configuration room: YAML to typed, checked settings (`loader.load` returns a `Config`).

It imports only `agent.core`: the sources, store, sinks and service read these settings, never
the other way round.
"""
