"""The collection's cheat sheet, one sheet of A4: every question, its short answer, its key formula and number, and
the follow-ups to be ready for, built offline from the catalog and the drills, so it never drifts from them.

    python -m qalib.tools.cheatsheet [--out cheatsheet/]     # or: make cheatsheet

Writes cheatsheet.html (print styles; formulas drawn by matplotlib's mathtext as inline SVG, so nothing is
fetched and no script runs) and, where Chromium is installed, cheatsheet.pdf printed from it.
"""

from __future__ import annotations

import argparse
import html
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

from qalib.notebook.catalog import CATALOG, Entry
from qalib.notebook.paths import ROOT
from qalib.practice import quiz

CHROMIUM = "/usr/bin/chromium"
FOLLOW_UPS_SHOWN = 2

# (pages, font size in pt), tried in order: one side of the sheet while its type stays readable (6.6 pt), then both
# sides at a larger type; the last is used whatever it takes, and the page count is printed.
LAYOUTS = ((1, 7.4), (1, 7.0), (1, 6.6), (2, 8.0), (2, 7.4), (2, 7.0), (2, 6.6), (2, 6.2))

STYLE = """
@page { size: A4 landscape; margin: 6mm; }
body { font-family: "DejaVu Sans", system-ui, sans-serif; font-size: FONT_SIZEpt; line-height: 1.28; margin: 0; color: #111; }
h1 { font-size: 12pt; margin: 0 0 1mm 0; }
.lede { margin: 0 0 2mm 0; color: #444; }
.grid { column-count: 3; column-gap: 5mm; }
.q { break-inside: avoid; margin: 0 0 1.6mm 0; padding: 1mm 1.6mm; border-left: 2px solid #2166ac; background: #f6f7f9; }
.q h2 { font-size: 8pt; margin: 0 0 0.6mm 0; }
.q h2 a { color: #111; text-decoration: none; }
.formula svg { width: auto; vertical-align: middle; max-width: 100%; }
.formula { margin: 0.6mm 0; }
.number { color: #2166ac; }
.follow { color: #444; margin: 0.6mm 0 0 0; padding-left: 3mm; }
.follow li { margin: 0; }
@media screen { body { max-width: 300mm; margin: 6mm auto; font-size: 10pt; } .grid { column-count: 2; } }
"""


MATH_PT = 10.0  # the size mathtext draws a formula at (matplotlib's default font.size; math_to_image's default)


def formula_svg(formula: str) -> str:
    """The formula as inline SVG, drawn by matplotlib's mathtext (glyphs as paths: no font or script needed)."""
    from matplotlib import mathtext
    from matplotlib.font_manager import FontProperties

    buf = io.BytesIO()
    try:
        mathtext.math_to_image(formula, buf, format="svg", dpi=72, prop=FontProperties(size=MATH_PT))
    except ValueError as err:
        raise ValueError(f"formula {formula!r} is not valid mathtext: {err}") from None
    svg = buf.getvalue().decode("utf-8")
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML
    # mathtext drew it at MATH_PT; its height in em keeps its glyphs at the page's type size, however many levels it
    # has (one fixed height for every formula squeezed a fraction's glyphs to half the type)
    height = float(re.search(r'height="([\d.]+)pt"', svg).group(1))
    return svg.replace("<svg ", f"<svg style='height: {height / MATH_PT:.3f}em' ", 1)


# LaTeX in the follow-up questions, as plain text: the commands they use, then braces and backslashes dropped.
LATEX_AS_TEXT = {r"\\cdot": "·", r"\\times": "×", r"\\top": "ᵀ", r"\\sqrt": "√", r"\\lVert": "‖", r"\\rVert": "‖",
                 r"\\ne": "≠", r"\\le": "≤", r"\\ge": "≥", r"\\approx": "≈", r"\\infty": "∞", r"\\pi": "π",
                 r"\\gamma": "γ", r"\\beta": "β", r"\\mu": "μ", r"\\sigma": "σ", r"\\omega": "ω", r"\\,": " "}


def latex_as_text(text: str) -> str:
    """'$q\\cdot k$ in $d\\times d_k$' -> 'q·k in d×d_k': readable without typesetting."""
    def plain(m: re.Match) -> str:
        math = m.group(1)
        for command, char in LATEX_AS_TEXT.items():
            math = re.sub(command + r"(?![a-zA-Z])", char, math)
        math = re.sub(r"\\(mathrm|mathbf|text|operatorname)\{([^}]*)\}", r"\2", math)
        math = re.sub(r"([·×√])\s+", r"\1", math)  # "q\\cdot k" -> "q·k"
        return re.sub(r"[{}\\]", "", math).replace("^ᵀ", "ᵀ")
    return re.sub(r"\$([^$]+)\$", plain, text)


def entry_html(entry: Entry) -> str:
    if not entry.formula or not entry.number:
        raise ValueError(f"catalog entry {entry.file} needs a formula and a number for the cheat sheet")
    stem = entry.file.removesuffix(".ipynb")
    follow = quiz.load(stem).follow_ups[:FOLLOW_UPS_SHOWN]
    items = "".join(f"<li>{html.escape(latex_as_text(f.question))}</li>" for f in follow)
    return (f"<section class='q'><h2><a href='../notebooks/{html.escape(entry.file)}'>{html.escape(stem[:2])} · "
            f"{html.escape(entry.question)}</a></h2>"
            f"<div>{html.escape(entry.short_answer)}</div>"
            f"<div class='formula'>{formula_svg(entry.formula)}</div>"
            f"<div class='number'>{html.escape(entry.number)}</div>"
            f"<ul class='follow'>{items}</ul></section>")


def page(entries: list[Entry], font_size: float = LAYOUTS[0][1]) -> str:
    body = "".join(entry_html(e) for e in entries)
    style = STYLE.replace("FONT_SIZE", f"{font_size:g}")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>qalib cheat sheet</title>"
            f"<meta name='qalib-font-size' content='{font_size:g}'>"
            f"<style>{style}</style></head><body><h1>qalib: the short answers</h1>"
            "<p class='lede'>Each question's 30-second answer, its key formula and number, and the follow-ups an "
            "interviewer asks next (answers in each notebook's drill and in the mock interview).</p>"
            f"<div class='grid'>{body}</div></body></html>")


def print_pdf(html_path: Path, pdf_path: Path, chromium: str = CHROMIUM) -> None:
    """Print the page with headless Chromium (a local file: nothing is fetched)."""
    if not Path(chromium).exists() and not shutil.which(chromium):
        raise FileNotFoundError(f"{chromium} is not installed: the HTML cheat sheet is written, the PDF is not "
                                "(make setup installs Chromium where it can)")
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-pdf-header-footer",
           "--disable-background-networking", f"--print-to-pdf={pdf_path}", html_path.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not pdf_path.is_file():
        raise RuntimeError(f"Chromium could not print {html_path}: {done.stderr[-500:]}")


def pdf_pages(pdf_path: Path) -> int:
    """How many pages a PDF has (its /Type /Page objects)."""
    return len(re.findall(rb"/Type\s*/Page(?!s)", pdf_path.read_bytes()))


def build(out_dir: Path, pdf: bool = True) -> list[Path]:
    entries = [e for e in CATALOG if e.exists]
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path, pdf_path = out_dir / "cheatsheet.html", out_dir / "cheatsheet.pdf"
    for pages, size in LAYOUTS if pdf else LAYOUTS[:1]:
        html_path.write_text(page(entries, size), encoding="utf-8")
        if not pdf:
            return [html_path]
        print_pdf(html_path, pdf_path)
        if pdf_pages(pdf_path) <= pages:
            break  # otherwise the next layout: a smaller type, or the sheet's second side
    return [html_path, pdf_path]


def font_size(html_path: Path) -> float:
    """The type size (pt) a built page was laid out in."""
    found = re.search(r"<meta name='qalib-font-size' content='([\d.]+)'>", html_path.read_text(encoding="utf-8"))
    if not found:
        raise ValueError(f"{html_path} is not a page written by qalib.tools.cheatsheet")
    return float(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the one-sheet cheat sheet (HTML and PDF).")
    parser.add_argument("--out", type=Path, default=ROOT / "cheatsheet")
    parser.add_argument("--no-pdf", action="store_true", help="write only the HTML page")
    args = parser.parse_args(argv)
    try:
        written = build(args.out, pdf=not args.no_pdf)
    except (FileNotFoundError, RuntimeError) as err:
        print(f"cheatsheet: {err}", file=sys.stderr)
        return 1
    for path in written:
        extra = f" ({pdf_pages(path)} page(s), {font_size(written[0]):g} pt)" if path.suffix == ".pdf" else ""
        print(f"wrote {path}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
