"""`python -m divclip.cli …`, the same as the `divclip` console script."""

import sys

from divclip.cli import main

sys.exit(main())
