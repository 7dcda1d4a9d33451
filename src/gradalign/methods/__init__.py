"""One module per method and per baseline."""
