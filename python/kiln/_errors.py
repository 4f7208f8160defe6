"""Coded errors raised from Python, with the same shape as the C++ ones (docs/errors.md)."""

from kiln._C import Error


def error(code: str, detail: str) -> Error:
    err = Error(f"{code}: {detail}")
    err.code = code
    err.detail = detail
    err.fx_node = ""
    return err
