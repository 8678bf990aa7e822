import sys

from cockpit.app.cli import main

sys.exit(main())
