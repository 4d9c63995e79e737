"""The review page: `edge-agent ledger web` (operator.md section 1).

Server-rendered HTML over aiohttp, loopback and read-only by default. The only writes (a review
mark, the retry of a dead notification) go through `agent.ledger.review` and
`agent.ledger.notifications`, the code the command line uses.
"""
