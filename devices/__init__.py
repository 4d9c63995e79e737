"""Simulated controllers (PLCs) served over Modbus TCP and OPC UA: an independent peer of ``agent``.

Never imports ``agent``: the simulators behave like field devices, which know nothing about
the agent that polls them. See docs/devices.md for the register map and node layout.
"""

from __future__ import annotations

from typing import NoReturn


def cli_main(argv: list[str] | None = None) -> NoReturn:
    """Run a simulated plant until SIGTERM/SIGINT and exit with its code (``python -m devices --help``).

    Imported lazily so that ``import devices`` stays cheap (asyncua alone costs ~48 MiB).
    """
    from devices.cli import main

    main(argv)


__all__ = ["cli_main"]
