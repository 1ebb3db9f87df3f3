"""`python -m divclip.trainer train --preset tiny-arith …` (the same as `divclip train …`)."""

import sys

from divclip.trainer.cli import main

sys.exit(main())
