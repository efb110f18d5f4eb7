"""``python -m bertaccel.cli``: the ``bertaccel`` command."""

import sys

from . import main

sys.exit(main())
