"""MkDocs hook: the package's version next to the site name in the header.

The version is read from the package the docs are built from, so the header
cannot drift from the release.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy_ulid import __version__

_TOPIC = re.compile(
    r'(<div class="md-header__topic">\s*<span class="md-ellipsis">\s*)([^<]+?)(\s*</span>)'
)


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Add ``<small class="md-header__version">`` after the site name, once."""
    label = f'<small class="md-header__version">{__version__}</small>'
    return _TOPIC.sub(lambda m: m[1] + m[2] + " " + label + m[3], output, count=1)
