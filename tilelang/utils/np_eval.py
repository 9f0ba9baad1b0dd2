"""Evaluate integer index expressions on numpy arrays (for checking layouts exhaustively)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx

_BIN = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "FloorDiv": np.floor_divide, "FloorMod": np.mod,
    "Min": np.minimum, "Max": np.maximum,
    "BitwiseXor": np.bitwise_xor, "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
    "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
    "EQ": np.equal, "NE": np.not_equal, "And": np.logical_and, "Or": np.logical_or,
}


class NotEvaluable(Exception):
    pass


def np_eval(expr, env: dict):
    """Value of ``expr`` with variables bound by ``env`` (Var handle -> array)."""
    if isinstance(expr, (int, np.ndarray)):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tvm.ir.Var):
        k = expr.__chandle__()
        if k not in env:
            raise NotEvaluable(expr.name)
        return env[k]
    name = type(expr).__name__
    if name in _BIN:
        return _BIN[name](np_eval(expr.a, env), np_eval(expr.b, env))
    if name == "Cast":
        return np_eval(expr.value, env)
    if name == "Not":
        return np.logical_not(np_eval(expr.a, env))
    if name == "Select":
        return np.where(np_eval(expr.condition, env), np_eval(expr.true_value, env),
                        np_eval(expr.false_value, env))
    raise NotEvaluable(str(expr))
