"""`python -m agent …` is `cockpit-agent …`."""

import sys

from agent.cli import main

sys.exit(main())
