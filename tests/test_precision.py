"""The logistic twin's product format (:mod:`fedqr._precision`)."""

from __future__ import annotations

import pytest

from fedqr._precision import PRODUCTS_ENV, listed_native, native_bf16, twin_products


def test_auto_follows_the_cpu() -> None:
    want = "bfloat16" if native_bf16() else "float32"
    assert twin_products({}) == want
    assert twin_products({PRODUCTS_ENV: "auto"}) == want
    assert twin_products({PRODUCTS_ENV: " "}) == want


@pytest.mark.parametrize("value", ["float32", "bfloat16", "FLOAT32", " bfloat16 "])
def test_a_chosen_format_is_kept(value: str) -> None:
    assert twin_products({PRODUCTS_ENV: value}) == value.strip().lower()


def test_a_bad_format_names_the_variable_the_choices_and_the_value() -> None:
    with pytest.raises(ValueError, match=r"FEDQR_TWIN_PRODUCTS must be one of auto, float32, "
                                         r"bfloat16, got 'fp16'"):
        twin_products({PRODUCTS_ENV: "fp16"})


@pytest.mark.parametrize(("text", "native"), [
    ("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512_fp16\n", True),
    ("flags\t\t: fpu amx_tile amx_bf16\nbugs\t\t: spectre\n", True),
    ("flags\t\t: fpu avx2 avx512f avx512_vnni\n", False),
    ("flags\t\t: fpu avx512_bf16_x\n", False),  # a whole flag, not a prefix
    ("processor\t: 0\nmodel name\t: Apple M2\n", False),  # no flags line
])
def test_native_is_a_listed_flag(text: str, native: bool) -> None:
    assert listed_native(text) is native
