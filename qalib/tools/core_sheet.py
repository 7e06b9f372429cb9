"""The core questions on one printed page: the drills' follow-ups marked `core = true`, each with its short answer,
for the night before an interview (the mock interview asks the same set with "core questions only" ticked).

    python -m qalib.tools.core_sheet [--out cheatsheet/]     # `make cheatsheet` builds it beside the cheat sheet

Writes core.html (print styles, nothing fetched, no script) and, where Chromium is installed, core.pdf: one A4 side,
the type made smaller (down to 6.6 pt) only if the list would not fit at 9 pt.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

from qalib.notebook.paths import ROOT
from qalib.practice import quiz
from qalib.tools.cheatsheet import latex_as_text, pdf_pages, print_pdf

SIZES = (9.0, 8.5, 8.0, 7.5, 7.0, 6.6)  # pt, tried in order until the list fits one page; the last is kept regardless

STYLE = """
@page { size: A4 portrait; margin: 7mm; }
body { font-family: "DejaVu Sans", system-ui, sans-serif; font-size: FONT_SIZEpt; line-height: 1.22; margin: 0; color: #111; }
h1 { font-size: 13pt; margin: 0 0 1mm 0; }
.lede { margin: 0 0 2.5mm 0; color: #444; }
ol { margin: 0; padding-left: 6mm; column-count: 2; column-gap: 7mm; }
li { break-inside: avoid; margin: 0 0 1.1mm 0; }
.q { font-weight: bold; }
.topic { color: #2166ac; font-weight: normal; }
@media screen { body { max-width: 190mm; margin: 8mm auto; } ol { column-count: 1; } }
"""


def core_follow_ups() -> list[tuple[str, quiz.FollowUp]]:
    """(notebook, follow-up) for every core follow-up, in notebook order."""
    return [(name, f) for name in quiz.available() for f in quiz.load(name).follow_ups if f.core]


def page(items: list[tuple[str, quiz.FollowUp]], font_size: float = SIZES[0]) -> str:
    """The HTML page: a numbered list of the questions (bold), each with its topic and short answer; all escaped."""
    rows = "".join(f"<li><span class='q'>{html.escape(latex_as_text(f.question))}</span> "
                   f"<span class='topic'>({html.escape(name[:2])})</span><br>{html.escape(latex_as_text(f.short))}</li>"
                   for name, f in items)
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>qalib: the core questions</title>"
            f"<meta name='qalib-font-size' content='{font_size:g}'>"
            f"<style>{STYLE.replace('FONT_SIZE', f'{font_size:g}')}</style></head><body>"
            f"<h1>The {len(items)} core questions</h1><p class='lede'>Say each answer aloud in about 15 seconds, then "
            "check it against the short answer below; the full answers are in each notebook's drill and in the mock "
            "interview (tick \"core questions only\").</p>"
            f"<ol>{rows}</ol></body></html>")


def build(out_dir: Path, pdf: bool = True) -> list[Path]:
    items = core_follow_ups()
    low, high = quiz.CORE_RANGE
    if not low <= len(items) <= high:
        raise ValueError(f"the drills mark {len(items)} follow-ups core; the core set is {low}-{high}")
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path, pdf_path = out_dir / "core.html", out_dir / "core.pdf"
    for size in SIZES if pdf else SIZES[:1]:
        html_path.write_text(page(items, size), encoding="utf-8")
        if not pdf:
            return [html_path]
        print_pdf(html_path, pdf_path)
        if pdf_pages(pdf_path) == 1:
            break
    return [html_path, pdf_path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the one-page list of core questions (HTML and PDF).")
    parser.add_argument("--out", type=Path, default=ROOT / "cheatsheet")
    parser.add_argument("--no-pdf", action="store_true", help="write only the HTML page")
    args = parser.parse_args(argv)
    try:
        written = build(args.out, pdf=not args.no_pdf)
    except (FileNotFoundError, RuntimeError, ValueError) as err:
        print(f"core_sheet: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}" + (f" ({pdf_pages(path)} page(s))" if path.suffix == ".pdf" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
