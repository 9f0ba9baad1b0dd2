"""Tools over tile programs (the public ``tilelang.tools`` names)."""

from .analyzer import AnalysisResult, Analyzer

__all__ = ["AnalysisResult", "Analyzer"]
