"""`python -m trainer train --preset tiny-arith …` (the same as `divclip train …`)."""

import sys

from trainer.cli import main

sys.exit(main())
