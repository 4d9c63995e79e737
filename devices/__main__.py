"""``python -m devices ...``: run a simulated plant standalone."""

import sys

from devices import cli_main

sys.exit(cli_main())
