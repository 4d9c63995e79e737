"""``python -m devices ...``: run a simulated plant standalone.

Only the entry point: the options are in ``devices.cli``, the running plant in ``devices.standalone``.
"""

from devices import cli_main

cli_main()
