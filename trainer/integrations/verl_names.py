"""Names the verl plug-in reads, importable without verl (the export and the sanity check use them)."""

METHOD_ENV = "DIVCLIP_METHOD"
"""The environment variable `divclip_method` reads its method string from."""
METHOD_MODE = "divclip_method"
"""The verl loss mode that runs any divclip method string (intersections, adaptive δ)."""
