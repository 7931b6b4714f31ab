"""A griffe extension: read Google-style ``Example:`` sections as examples.

Our docstrings say ``Example:``; griffe only treats ``Examples:`` as a section
of ``>>>`` code and renders ``Example:`` as Markdown prose, which mangles the
doctest output. Renaming the heading before parsing keeps the sources as
they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` to ``Examples:`` in every docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the heading before griffe parses the docstring."""
        if obj.docstring is not None:
            obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)
