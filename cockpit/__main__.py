import sys

from cockpit.cli import main

sys.exit(main())
