"""``python -m agentledger``: the ``agentledger`` command."""

import sys

from .cli import main

sys.exit(main())
