"""edge-agent: industrial gateway edge agent (OPC UA / Modbus -> SQLite -> MQTT / HTTP)."""

__version__ = "0.1.0"
