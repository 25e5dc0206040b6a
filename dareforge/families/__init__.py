"""Task families: one module per family declaring it whole (see `base.py`), found through `registry.py`."""
