import os

# Hypothesis profile for CI: deterministic, moderate example counts, no deadline (shared 2-core machines).
from hypothesis import settings

settings.register_profile("divclip", max_examples=60, deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "divclip"))
