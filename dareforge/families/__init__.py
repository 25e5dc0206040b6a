"""Task families: one module per family declaring it whole (see `family.py`), found through `registry.py`."""
