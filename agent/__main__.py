"""`python -m agent`: the same as the `edge-agent` command."""

from agent.cli.main import main

main()
