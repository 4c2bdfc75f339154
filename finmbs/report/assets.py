"""The report's bundled KaTeX (vendor/katex, MIT), read once and inlined: fonts become data: URIs, so the one
HTML file renders math with no network and no files beside it."""

from __future__ import annotations

import base64
import re
from functools import lru_cache
from pathlib import Path

KATEX = Path(__file__).parent / "vendor" / "katex"
_FONT_SRC = re.compile(r'src:url\(fonts/([\w-]+)\.woff2\) format\("woff2"\)(?:,url\([^)]*\) format\("[^"]*"\))*')


def _font_data(match: re.Match[str]) -> str:
    data = base64.b64encode((KATEX / "fonts" / f"{match.group(1)}.woff2").read_bytes()).decode("ascii")
    return f'src:url(data:font/woff2;base64,{data}) format("woff2")'


@lru_cache(maxsize=1)
def assets() -> dict[str, str]:
    """{"katex_css", "katex_js"}: KaTeX's stylesheet with its woff2 fonts inline, and katex + auto-render."""
    css = _FONT_SRC.sub(_font_data, (KATEX / "katex.min.css").read_text(encoding="utf-8"))
    if "url(fonts/" in css:
        raise RuntimeError("vendor/katex/katex.min.css names a font that is not bundled as woff2")
    js = "\n".join((KATEX / name).read_text(encoding="utf-8") for name in ("katex.min.js", "auto-render.min.js"))
    return {"katex_css": css, "katex_js": js}
