"""`edge-agent ledger ...`: the central ledger's command group, one module per command group.

`group` is the click group (registered by `agent.cli.main`); `context` what the commands share
(the connection, the exit codes); `schema` (migrate, check), `intake` (run, import), `report`,
`notifications` (the listing and retry), `demo` (with `demo_run`, its processes) and `tables`
(the report's text for people).
"""
