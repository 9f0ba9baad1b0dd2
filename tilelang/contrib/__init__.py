"""Integration with other flows: TVM Relax model graphs (``tilelang.contrib.relax``)."""
