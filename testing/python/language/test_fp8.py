"""tilelang.language.fp8.determine_fp8_type: the public helper that names the 8-bit float
formats of the hardware."""

import pytest

import tilelang.language as T
from tilelang.errors import DSLError
from tilelang.language.fp8 import determine_fp8_type


def test_formats_are_the_dtype_objects():
    assert determine_fp8_type() is T.float8_e4m3fn or determine_fp8_type() == T.float8_e4m3fn
    assert determine_fp8_type("e5m2") == "float8_e5m2"
    assert determine_fp8_type("e4m3").bits == 8


def test_unknown_format_names_the_argument():
    with pytest.raises(DSLError, match="fp8_type is 'e4m3' or 'e5m2', got 'e3m4'"):
        determine_fp8_type("e3m4")
