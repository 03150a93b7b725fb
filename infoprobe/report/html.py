"""The skeleton of the single self-contained ``report.html``: its style sheet, the script
that marks whether every image rendered, figures inlined as base64 PNG, the document
around a body. The sections that fill it are in :mod:`infoprobe.report.sections`.

The page loads nothing from outside (no external src or href) and opens without a server.
"""

from __future__ import annotations

import base64
from html import escape

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
  color: #1d2430; background: #f6f7f9; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 60px; background: #fff;
  box-shadow: 0 0 12px rgba(0,0,0,.06); }
h1 { margin: 0 0 4px; font-size: 1.7em; }
h2 { margin-top: 2.2em; border-bottom: 2px solid #e3e7ee; padding-bottom: 4px; }
h3 { margin-top: 1.6em; }
.caveat { background: #fff6d8; border-left: 5px solid #e0a800; padding: 10px 14px;
  margin: 16px 0; }
.verdicts li { margin: 3px 0; font-family: ui-monospace, Menlo, Consolas, monospace;
  font-size: .92em; }
table { border-collapse: collapse; margin: 10px 0 18px; font-size: .92em; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e7ee; }
th { background: #eef1f6; text-align: left; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.viol { color: #b00020; font-weight: 600; }
tr:nth-child(even) td { background: #fafbfc; }
figure { margin: 18px 0 28px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e7ee; }
figcaption { color: #4a5568; font-size: .92em; margin-top: 6px; max-width: 980px; }
.broken { color: #b00020; font-weight: 600; }
dl.defs dt { font-weight: 600; margin-top: 6px; }
dl.defs dd { margin-left: 18px; }
pre { background: #f3f5f8; padding: 10px; overflow-x: auto; font-size: .82em; }
.muted { color: #6b7585; }
.answer { background: #eef4ff; border-left: 6px solid #1f4e9c; padding: 12px 18px;
  margin: 14px 0 20px; }
.answer .verdict { font-size: 1.25em; font-weight: 600; margin: 0 0 8px; }
.answer ul { margin: 6px 0; padding-left: 20px; }
.answer li { margin: 4px 0; font-size: 1.05em; }
"""

RENDER_CHECK = """
window.addEventListener("load", function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) {
    var good = imgs[i].complete && imgs[i].naturalWidth > 0;
    imgs[i].setAttribute("data-rendered", good ? "yes" : "no");
    if (good) { ok++; } else {
      imgs[i].insertAdjacentHTML("afterend", "<p class='broken'>figure failed to load</p>");
    }
  }
  document.body.setAttribute("data-images-rendered", ok + "/" + imgs.length);
  document.body.setAttribute("data-page-height", document.documentElement.scrollHeight);
});
"""


def figure_html(png: bytes, alt: str, caption: str) -> str:
    """An <img> with the PNG inlined as a base64 data URI, and its caption."""
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{escape(alt)}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def page(title: str, body: str) -> str:
    """The whole document around ``body``; ``title`` is already escaped."""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{title}</title><style>{STYLE}</style><script>{RENDER_CHECK}</script>"
        f"</head><body><main>\n{body}\n</main></body></html>\n"
    )
