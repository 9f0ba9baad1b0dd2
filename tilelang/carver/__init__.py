"""Hardware descriptions (the public ``tilelang.carver`` names)."""
