"""The central ledger: many gateways' events into one PostgreSQL, arbitrated by unique constraints.

Decisions are `agent.core`'s (the same rules as the gateway's SQLite store); this package holds
only the PostgreSQL side: the schema and its migrations (`migrations`, `sql/`), the batch
arbitration (`arbiter`), the report (`report`) and the connection (`connection`). Installed with
the optional extra `edge-agent[ledger]`; a gateway never imports it.
"""
