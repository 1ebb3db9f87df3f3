"""`python -m divclip.trainer train --preset tiny-arith …`: the `divclip` command line, as `divclip train …`."""

import sys

from divclip.cli import main

sys.exit(main())
