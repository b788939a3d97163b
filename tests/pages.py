"""What the report-page tests share: reading a page's tags and text, checking that a PNG is
a picture, and an export whose names are hostile HTML."""

from __future__ import annotations

import html.parser
import io
from pathlib import Path

from tests.synth import Synth

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"


def nonblank(png: bytes, *, min_colors: int = 4, min_ink: float = 0.03) -> tuple[int, float]:
    """(distinct colours, share of non-white pixels) of a PNG; asserts it is a picture."""
    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    pixels = np.asarray(img).reshape(-1, 3).astype(np.int64)
    ink = float((pixels.sum(axis=1) < 3 * 245).mean())
    colors = len(np.unique(pixels[:, 0] << 16 | pixels[:, 1] << 8 | pixels[:, 2]))
    assert img.width >= 300 and img.height >= 150, img.size
    assert colors >= min_colors and ink >= min_ink, (colors, ink)
    return colors, ink


class Tags(html.parser.HTMLParser):
    """Every start tag with its attributes, and the page text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Tags:
    p = Tags()
    p.feed(page)
    return p


HOSTILE_RANGE = "<script>document.title='pwned'</script>"


HOSTILE_IMG = '<img src=x onerror="document.title=\'pwned\'">'


HOSTILE_KERNEL = "void k<</td></tr></table><script>alert(2)</script>>(float *)"


def hostile_export(path: Path) -> Path:
    s = Synth()
    s.range(HOSTILE_RANGE, 1_000, 90_000)
    s.range(HOSTILE_IMG, 2_000, 50_000, inline=True)
    s.kernel(HOSTILE_KERNEL, 10_000, 40_000, launch=(3_000, 3_500))
    s.kernel("<b>bold</b>_gemm", 40_000, 45_000, launch=(60_000, 60_500))
    s.memcpy.append((50_000, 51_000, 1, (1 << 48) | (1 << 24), 4096, 1))
    return s.write(path)
