"""A report page (``reports.page.model.Page``) as ONE self-contained HTML file.

- Nothing is fetched to show it: the styles are inline, the plots are PNGs in ``data:`` URLs,
  there are no scripts, fonts or external links (only ``#anchors``), and a Content Security
  Policy (``default-src 'none'``) forbids any request or script, should anything slip in.
- Readable without JavaScript, and printable.
- Everything that came from the export (range and kernel names, command lines, notes) is
  escaped (``html.escape``): a range named ``<script>...</script>`` shows as text.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from reports.page.model import Facts, Figure, Page, Section, Sentences, Table, Text, shown_table
from reports.page.plots import category_color
from reports.render import shorten_columns

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
       "form-action 'none'")
TITLE_CHARS = 4000  # full names in tooltips, up to this length

STYLE = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial,
       sans-serif; color: #1d2125; background: #fff; margin: 0; }
main { max-width: 1180px; margin: 0 auto; padding: 1.2rem 1.5rem 3rem; }
header h1 { font-size: 1.55rem; margin: 0.3rem 0 0.4rem; overflow-wrap: anywhere; }
.lead { color: #444; margin: 0.15rem 0; overflow-wrap: anywhere; }
.lead.warning { color: #7a1f00; background: #fff1eb; border-left: 3px solid #d9480f;
                padding: 0.3rem 0.6rem; margin: 0.4rem 0; }
nav { margin: 0.8rem 0 0.4rem; padding: 0.5rem 0; border-top: 1px solid #ddd;
      border-bottom: 1px solid #ddd; font-size: 0.9rem; }
nav a { margin-right: 1.1rem; color: #2b5797; text-decoration: none; white-space: nowrap; }
section { margin-top: 1.6rem; }
h2 { font-size: 1.22rem; border-bottom: 2px solid #4477AA; padding-bottom: 0.2rem; }
h3 { font-size: 1.02rem; margin: 1.1rem 0 0.4rem; }
ul.answers { padding-left: 1.2rem; }
ul.answers li { margin: 0.2rem 0; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.86rem; margin: 0.3rem 0; }
th, td { padding: 0.22rem 0.6rem; border-bottom: 1px solid #e3e3e3; text-align: left;
         vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.name { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
          font-size: 0.8rem; overflow-wrap: anywhere; min-width: 9rem; max-width: 42rem; }
td.cat { white-space: nowrap; }
td.text { white-space: pre-wrap; overflow-wrap: anywhere; max-width: 42rem; }
.swatch { display: inline-block; width: 0.7em; height: 0.7em; margin-right: 0.35em;
          border-radius: 2px; vertical-align: baseline; }
p.note { color: #6b5b00; background: #fffbea; border-left: 3px solid #e6c300;
         padding: 0.25rem 0.6rem; margin: 0.25rem 0; font-size: 0.85rem;
         overflow-wrap: anywhere; }
figure { margin: 0.8rem 1.2rem 0.8rem 0; display: inline-block; vertical-align: top;
         max-width: 100%; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.85rem; max-width: 40rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; font-family: ui-monospace, SFMono-Regular,
              Menlo, Consolas, monospace; font-size: 0.82rem; }
footer { margin-top: 2.5rem; color: #777; font-size: 0.8rem; }
"""

NAME_KINDS = {"name", "kernel", "range", "runner_up", "config", "operation", "export"}
SIGNATURES = {"name", "kernel", "runner_up"}  # kernel names: shortened by their structure
KERNEL_CHARS = 64


def esc(value: Any) -> str:
    """Text for HTML content or a quoted attribute."""
    return html.escape(str(value), quote=True)


def page_html(page: Page, *, generator: str = "nsys-mine") -> str:
    """The whole page: one HTML document with nothing to fetch."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{esc(page.title)}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        "<main>",
        "<header>",
        f"<h1>{esc(page.title)}</h1>",
        *[f'<p class="lead{" warning" if line.startswith("Warning: ") else ""}">{esc(line)}</p>'
          for line in page.lead],
    ]
    if page.sections:
        head.append("<nav>" + "\n".join(f'<a href="#{esc(s.anchor)}">{esc(s.title)}</a>'
                                        for s in page.sections) + "</nav>")
    head.append("</header>")
    body = [_section(s) for s in page.sections]
    tail = [f"<footer>Generated by {esc(generator)}: one file, nothing fetched, no scripts."
            "</footer>", "</main>", "</body>", "</html>", ""]
    return "\n".join(head + body + tail)


def _section(section: Section) -> str:
    parts = [f'<section id="{esc(section.anchor)}">', f"<h2>{esc(section.title)}</h2>"]
    parts += [_block(b) for b in section.blocks]
    parts.append("</section>")
    return "\n".join(parts)


def _block(block: Any) -> str:
    if isinstance(block, Text):
        return f"<p>{esc(block.text)}</p>"
    if isinstance(block, Sentences):
        return ('<ul class="answers">' + "".join(f"<li>{esc(s)}</li>" for s in block.items)
                + "</ul>")
    if isinstance(block, Facts):
        return ('<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>"
                                               for k, v in block.items) + "</dl>")
    if isinstance(block, Figure):
        data = base64.b64encode(block.png).decode("ascii")
        return (f'<figure><img src="data:image/png;base64,{data}" alt="{esc(block.alt)}">'
                f"<figcaption>{esc(block.alt)}</figcaption></figure>")
    if isinstance(block, Table):
        return _table(block)
    raise TypeError(f"unknown block {type(block).__name__}")


def _table(table: Table) -> str:
    t = shown_table(table)
    out = [f"<h3>{esc(table.title)}</h3>"] if table.title else []
    if t.columns and t.cells:
        out.append('<div class="scroll"><table>')
        out.append("<thead><tr>" + "".join(
            f'<th class="num">{esc(h)}</th>' if n else f"<th>{esc(h)}</th>"
            for h, n in zip(t.headers, t.numeric, strict=True)) + "</tr></thead>")
        out.append("<tbody>")
        short = _short_kernel_names(t.columns, t.values)
        for i, (cells, values) in enumerate(zip(t.cells, t.values, strict=True)):
            tds = [_td(col, (short[col][i] if col in short else "") or cell, value, numeric,
                       tree=col == table.view.tree)
                   for col, cell, value, numeric
                   in zip(t.columns, cells, values, t.numeric, strict=True)]
            out.append("<tr>" + "".join(tds) + "</tr>")
        out.append("</tbody></table></div>")
    out += [f'<p class="note">{esc(n)}</p>' for n in t.notes]
    return "\n".join(out)


def _short_kernel_names(columns: list[str], values: list[list[Any]]) -> dict[str, list[str]]:
    """The kernel-name columns' cells, each name shortened by its structure to KERNEL_CHARS;
    different names that would read the same (in one column or across them: a kernel and its
    runner-up) told apart, as in the terminal's tables (``render.shorten_columns``)."""
    kernels = [c for c in columns if c in SIGNATURES or c.endswith("_kernel")]
    whole = {c: ["" if row[columns.index(c)] is None else str(row[columns.index(c)])
                 for row in values] for c in kernels}
    return shorten_columns(whole, dict.fromkeys(kernels, KERNEL_CHARS))


def _td(column: str, cell: str, value: Any, numeric: bool, tree: bool = False) -> str:
    """One cell; a kernel name's ``cell`` comes shortened (``_short_kernel_names``); the
    names of a tree (indented) do not wrap."""
    if numeric:
        return f'<td class="num">{esc(cell)}</td>'
    if column == "category" and cell:
        return (f'<td class="cat"><span class="swatch" '
                f'style="background:{category_color(cell)}"></span>{esc(cell)}</td>')
    if column in NAME_KINDS or column.endswith("_kernel"):
        full = str(value) if value is not None else ""
        title = f' title="{esc(full[:TITLE_CHARS])}"' if full and full != cell else ""
        pre = ' style="white-space: pre"' if tree else ""  # indented, on one line
        return f'<td class="name"{title}{pre}>{esc(cell)}</td>'
    return f'<td class="text">{esc(cell)}</td>'
