"""Training loops shared by several methods."""
