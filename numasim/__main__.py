"""``python -m numasim``: the same as the ``numasim`` command."""

import sys

from .cli import main

sys.exit(main())
