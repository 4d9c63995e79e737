"""Sources: read controllers (Modbus, OPC UA) and hand observations to a sink; never the store."""
