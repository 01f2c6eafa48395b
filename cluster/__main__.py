"""`python -m cluster ...`: the same as `swarmproxy cluster ...` (tests and systemd units use it)."""

import sys

from cluster.cli import main

sys.exit(main())
