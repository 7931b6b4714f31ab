"""Reading the package's own source as syntax trees, for the layout tests."""

from __future__ import annotations

import ast
import gc


def parse(source: str) -> ast.Module:
    """``ast.parse`` with the garbage collector paused.

    On CPython 3.11 the AST constructor's recursion depth is one global: a
    finalizer that runs during the parse (a pooled connection that another
    test in this worker dropped, logging its reset error with a traceback,
    which parses source too) makes it raise ``SystemError: AST constructor
    recursion depth mismatch`` (python/cpython#106905).
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if paused:
            gc.enable()
