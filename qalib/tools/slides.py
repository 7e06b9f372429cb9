"""`make slides`: one self-contained reveal.js deck per notebook, for teaching from slides.

    python -m qalib.tools.slides [01_scaled_attention ...] [--out slides]   # build (executes each notebook), measure
    python -m qalib.tools.slides --mark [01_scaled_attention ...]           # (re)write the cells' slide metadata

Slide boundaries are the cells' own `slideshow.slide_type` metadata, which the notebooks carry (`--mark` sets it
from their headings: a `##` section starts a slide, a `###` step a vertical sub-slide, the set-up cell is
skipped). Building then turns the executed notebook into a deck:
- each slide keeps its heading, its display formulas and the lead sentence of each paragraph; the full
  explanation goes into the speaker notes (press S in the deck);
- a heading in the middle of a cell starts its own slide (`###`: sub-slide); the set-up section is left out; the
  first slide shows the title, the question and the 30-second answer (the longer answer goes to the notes);
- code is hidden; figures and demo figures (in the state the run left them) stay, one figure per slide: a second
  figure under the same heading continues on a vertical sub-slide, so no slide needs scrolling for its figures;
- a cell's ✓ / ≡ / ❝ lines become one badge ("✓ 3 measured · ≡ 1 derived"), their full text in the notes;
- the drill's follow-ups become sub-slides: the question, then the answer on the next click (a fragment).
The build then shows every slide of every deck in headless Chromium at 1280 x 720, after MathJax: a slide that runs
over is zoomed out to fit by the deck itself (never below 0.6), and the build fails naming any slide that still does
not fit.
reveal.js comes from the files the sphinx-revealjs package bundles and MathJax from jupyter-server-mathjax, both
copied next to the decks: nothing is fetched from a network.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import re
import shutil
import sys
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

from qalib.notebook.claims import MARKS
from qalib.notebook.paths import ROOT
from qalib.practice import quiz
from qalib.tools.nbtools import collection_paths, execute
from qalib.tools.site import MATHJAX_URL, copy_mathjax, staticize

TEMPLATES = Path(__file__).parent / "site_templates"
REVEAL_DIR = "revealjs"  # next to the decks
WIDTH, HEIGHT = 1280, 720


# -- the boundaries, carried by the notebooks -------------------------------------------------------------------
def slide_type_for(cell) -> str:
    """What a cell is in the deck, from its own text: '##' heading -> a new slide, '###' -> a sub-slide, the set-up
    cell -> skipped, anything else continues the slide it follows."""
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    if cell.cell_type == "markdown":
        if re.match(r"#{1,2} ", first):
            return "slide"
        if first.startswith("### "):
            return "subslide"
        return "-"
    if re.search(r"^import qalib$", cell.source, re.M):
        return "skip"
    return "-"


def mark(path: Path) -> int:
    """Write every cell's slideshow metadata; return how many cells changed."""
    nb = nbformat.read(path, as_version=4)
    changed = 0
    for cell in nb.cells:
        want = slide_type_for(cell)
        if cell.metadata.get("slideshow", {}).get("slide_type") != want:
            cell.metadata["slideshow"] = {"slide_type": want}
            changed += 1
    if changed:
        nbformat.write(nb, path)
    return changed


# -- slide text and speaker notes -------------------------------------------------------------------------------
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
LEAD = re.compile(r"^\*\*[^*]+\*\*")  # a paragraph that opens in bold: "**Prediction.** Without ..."
INLINE_MATH = re.compile(r"\$[^$]+\$")
ABBREVIATIONS = re.compile(r"\b(e\.g\.|i\.e\.|et al\.|vs\.|cf\.|sec\.|secs\.|eq\.|Fig\.|Table\.|no\.)", re.I)


def lead_sentence(text: str) -> str | None:
    """The bold opening and the rest of its sentence, "**Task.** Symbols $x_t \\in \\{1..m\\}$ repeat.": the
    sentence ends at . ! or ? followed by a space or the end, never inside inline math."""
    bold = LEAD.match(text)
    if not bold:
        return None
    def hide(m: re.Match) -> str:
        return "x" * len(m.group(0))  # same length: positions in the mask are positions in the text

    masked = ABBREVIATIONS.sub(hide, INLINE_MATH.sub(hide, text))  # no sentence ends inside formulas or "e.g."
    end = re.search(r"[.!?](\s|$)", masked[bold.end():])
    return text if end is None else text[:bold.end() + end.start() + 1]


def split_markdown(source: str) -> tuple[str, str]:
    """(what the slide shows, the speaker notes). The slide keeps headings, display formulas and the bold lead
    sentence of a paragraph; the notes get the whole text, so nothing of the explanation is lost."""
    shown = []
    for block in re.split(r"\n\s*\n", source):
        text = block.strip()
        if not text:
            continue
        if text.startswith("#"):
            heading, _, rest = text.partition("\n")
            shown.append(heading)
            text = rest.strip()
        shown += [m.group(0) for m in DISPLAY_MATH.finditer(text)]
        lead = lead_sentence(text)
        if lead:
            shown.append(lead)
    prose = DISPLAY_MATH.sub("", re.sub(r"^#.*$", "", source, flags=re.M)).strip()
    return "\n\n".join(shown), prose


def statement_output(lines: list[str]) -> dict:
    return nbformat.v4.new_output("stream", name="stdout", text="\n".join(lines) + "\n")


def slim_outputs(cell) -> None:
    """Keep what a slide can show: images, widget figures and HTML, and the ✓ / ≡ / ❝ lines (not dict reprs)."""
    kept = []
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        claim = out.get("metadata", {}).get("qalib") == "claims"  # a quiet claim: its plain text is the full line
        if out.get("output_type") == "stream" or claim:
            text = data.get("text/plain", "") if claim else out.get("text", "")
            lines = [line for line in text.splitlines() if line.startswith(MARKS)]
            if lines:
                kept.append(statement_output(lines))
        elif any(k.startswith("image/") or k == "text/html" for k in data):
            kept.append(out)
    cell.outputs = kept


def drill_cells(stem: str) -> list:
    """The follow-ups, one vertical sub-slide each: the question, then our short answer on the next click (the
    whole answer in the notes)."""
    cells = []
    for i, f in enumerate(quiz.load(stem).follow_ups, 1):
        cells += [nbformat.v4.new_markdown_cell(f"### Follow-up {i}\n\n**{f.question}**",
                                                metadata={"slideshow": {"slide_type": "subslide"}}),
                  nbformat.v4.new_markdown_cell(f.short, metadata={"slideshow": {"slide_type": "fragment"}}),
                  nbformat.v4.new_markdown_cell(f.answer, metadata={"slideshow": {"slide_type": "notes"}})]
    return cells


def has_figure(cell) -> bool:
    """Whether a code cell shows a figure: an image, or a demo's HTML with one inside."""
    return any(any(k.startswith("image/") for k in out.get("data", {})) or "<img" in str(out.get("data", {}).get("text/html", ""))
               for out in cell.get("outputs", []))


HEADING = re.compile(r"^(#{1,4}) \S", re.M)
SETUP_HEADING = re.compile(r"^#{1,3} Set-up\s*$")
TITLE_KEEPS = ("**The question.**", "**The answer in 30 seconds.**")  # the title slide: the rest goes to the notes


def split_at_headings(cell) -> list:
    """A markdown cell with headings after its first line, as one cell per heading: a '#'/'##' heading starts a
    slide, a '###' or '####' a sub-slide, wherever it sits in the cell (the first piece keeps the cell's own boundary)."""
    if cell.cell_type != "markdown":
        return [cell]
    starts = [m.start() for m in HEADING.finditer(cell.source) if m.start() > 0]
    if not starts:
        return [cell]
    pieces, bounds = [], [0, *starts, len(cell.source)]
    for a, b in zip(bounds, bounds[1:]):
        text = cell.source[a:b].strip("\n")
        if not text.strip():
            continue
        kind = cell.metadata["slideshow"]["slide_type"] if a == 0 else (
            "subslide" if text.startswith(("### ", "#### ")) else "slide")
        pieces.append(nbformat.v4.new_markdown_cell(text, metadata={"slideshow": {"slide_type": kind}}))
    return pieces


def title_slide(source: str) -> tuple[str, str]:
    """(the title slide, its notes): the title, the question and the 30-second answer on the slide; the legend and
    the longer answer in the notes."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", source) if p.strip()]
    shown = [p for i, p in enumerate(paras) if i == 0 or p.startswith(TITLE_KEEPS)]
    return "\n\n".join(shown), "\n\n".join(p for p in paras[1:] if p not in shown)


def statement_badge(lines: list[str]) -> str:
    """'✓ 3 measured · ≡ 2 derived · ❝ 1 quoted': what a slide's statements are, their text in the notes."""
    from qalib.notebook.claims import IDENTITY, QUOTE, TICK

    counts = [(sum(line.startswith(mark) for line in lines), mark, word)
              for mark, word in ((TICK, "measured"), (IDENTITY, "derived"), (QUOTE, "quoted"))]
    return " · ".join(f"{mark} {n} {word}" for n, mark, word in counts if n)


def deck_notebook(nb, stem: str):
    """The executed notebook rewritten for the deck (see the module docstring). The notebook itself is not changed."""
    nb = copy.deepcopy(nb)
    staticize(nb)  # demo widgets -> their figure and control values, as the run left them
    for i, cell in enumerate(nb.cells):
        if cell.metadata.get("slideshow", {}).get("slide_type") is None:
            raise ValueError(f"{stem}: cell {i} has no slideshow metadata; run `python -m qalib.tools.slides --mark {stem}`")
    nb.cells = [piece for i, cell in enumerate(nb.cells) for piece in ([cell] if i == 0 else split_at_headings(cell))]
    cells, slide_statements = [], []
    figure_on_slide, heading, in_setup = False, "", False

    def flush_badge() -> None:
        """End a slide: one badge for all its statements ("✓ 3 measured · ≡ 1 derived")."""
        if slide_statements:
            cells.append(nbformat.v4.new_markdown_cell(
                f"<p class='qalib-badge'>{statement_badge(slide_statements)}</p>", metadata={"slideshow": {"slide_type": "-"}}))
            slide_statements.clear()

    for i, cell in enumerate(nb.cells):
        kind = cell.metadata["slideshow"]["slide_type"]
        if kind in ("slide", "subslide"):
            flush_badge()
        if kind in ("slide", "subslide") and cell.cell_type == "markdown":
            in_setup = bool(SETUP_HEADING.match(cell.source.strip().splitlines()[0])) if cell.source.strip() else False
        if kind == "skip" or in_setup:
            continue
        if kind in ("slide", "subslide"):
            figure_on_slide = False
            if cell.cell_type == "markdown":
                heading = re.sub(r"^#+\s*", "", cell.source.strip().splitlines()[0]) if cell.source.strip() else ""
        if cell.cell_type == "code" and re.search(r"^quiz\(", cell.source, re.M):
            cells += drill_cells(stem)
            continue
        if cell.cell_type == "markdown":
            shown, notes = title_slide(cell.source) if i == 0 else split_markdown(cell.source)
            if shown or kind in ("slide", "subslide"):
                cells.append(nbformat.v4.new_markdown_cell(shown, metadata={"slideshow": {"slide_type": kind}}))
            if notes:
                cells.append(nbformat.v4.new_markdown_cell(notes, metadata={"slideshow": {"slide_type": "notes"}}))
            continue
        slim_outputs(cell)
        statements = [line for out in cell.outputs if out.output_type == "stream" for line in out.text.splitlines()]
        cell.outputs = [out for out in cell.outputs if out.output_type != "stream"]  # slim_outputs left only claims
        notes_cell = nbformat.v4.new_markdown_cell("\n\n".join(f"`{line}`" for line in statements),
                                                   metadata={"slideshow": {"slide_type": "notes"}})
        if has_figure(cell):
            if figure_on_slide:  # the slide already shows one: this one goes below it, on a sub-slide
                flush_badge()
                cells.append(nbformat.v4.new_markdown_cell(f"### {heading} (continued)",
                                                           metadata={"slideshow": {"slide_type": "subslide"}}))
            figure_on_slide = True
        if cell.outputs:
            cells.append(cell)
        if statements:  # the slide's badge counts them (added at its end); their text goes into the notes
            slide_statements += statements
            cells.append(notes_cell)
    flush_badge()
    nb.cells = cells
    return nb


# -- the files ---------------------------------------------------------------------------------------------------
def reveal_source() -> Path:
    """reveal.js's dist/ and plugin/ as the sphinx-revealjs package ships them (found without importing it: its
    module needs Sphinx, which qalib does not install)."""
    spec = importlib.util.find_spec("sphinx_revealjs")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("reveal.js comes from the sphinx-revealjs package: `make setup` installs it "
                                "(pip install --no-deps sphinx-revealjs)")
    return Path(list(spec.submodule_search_locations)[0]) / "_static" / "revealjs"


def exporter() -> SlidesExporter:
    return SlidesExporter(template_file="offline_slides.html.j2", extra_template_paths=[str(TEMPLATES)],
                          reveal_url_prefix=REVEAL_DIR, reveal_theme="white", reveal_width=str(WIDTH),
                          reveal_height=str(HEIGHT), reveal_scroll=True, mathjax_url=MATHJAX_URL,
                          exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)


# -- measuring a built deck ---------------------------------------------------------------------------------------
CHROMIUM = Path("/usr/bin/chromium")  # Debian's, which `make setup` installs where it can
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
MIN_ZOOM = 0.6  # the deck zooms a full slide out to fit, never below this (offline_slides.html.j2)


def overflowing_slides(deck: Path, page) -> list[str]:
    """Every slide of a built deck shown in `page` (a Playwright page at 1280 x 720), after MathJax has typeset it:
    the slides whose content still runs past the slide's height, or fits only below MIN_ZOOM, as readable lines."""
    page.goto(deck.resolve().as_uri())
    page.wait_for_function("window.Reveal && Reveal.isReady()", timeout=60_000)
    page.wait_for_function("window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0", timeout=60_000)
    total = page.evaluate("Reveal.getTotalSlides()")
    page.evaluate("Reveal.slide(0, 0)")
    bad = []
    for _ in range(total):
        page.wait_for_function("MathJax.Hub.queue.pending === 0", timeout=30_000)
        height, room, zoom, where, title = page.evaluate(
            "(() => { const s = Reveal.getCurrentSlide(); const h = s.querySelector('h1, h2, h3, h4');"
            " return [s.scrollHeight, s.clientHeight, parseFloat(s.style.zoom || 1), Reveal.getIndices(),"
            " h ? h.textContent.trim().slice(0, 60) : '']; })()")
        if height > room * 1.01 or zoom < MIN_ZOOM:
            bad.append(f"slide {where['h']}.{where.get('v', 0)} '{title}': {height} px of content on {room} px "
                       f"at zoom {zoom:.2f}")
        page.evaluate("Reveal.next()")
    return bad


def measure(decks: list[Path]) -> dict[str, list[str]]:
    """Each deck's overflowing slides ({deck name: lines}), measured in headless Chromium at WIDTH x HEIGHT."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(f"measuring the slides needs Chromium at {CHROMIUM} (`make setup` installs it as root)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            return {deck.name: overflowing_slides(deck, page) for deck in decks}
        finally:
            browser.close()


def write_deck(nb, stem: str, out_dir: Path) -> Path:
    """The executed notebook `nb` as out_dir/<stem>.html, with reveal.js and MathJax beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / REVEAL_DIR / "dist" / "reveal.js").exists():
        shutil.copytree(reveal_source(), out_dir / REVEAL_DIR, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.map", "*.esm.js"))
    copy_mathjax(out_dir / "mathjax")
    body, _ = exporter().from_notebook_node(deck_notebook(nb, stem))
    target = out_dir / f"{stem}.html"
    target.write_text(body, encoding="utf-8")
    return target


def build(stems: list[str] | None, out_dir: Path) -> list[Path]:
    paths = [p for p in collection_paths() if not p.name.startswith("00_")]
    if stems:
        unknown = sorted(set(stems) - {p.stem for p in paths})
        if unknown:
            raise ValueError(f"no topic notebook named {unknown}; choose from {[p.stem for p in paths]}")
        paths = [p for p in paths if p.stem in stems]
    written = []
    for path in paths:
        nb, seconds = execute(path, timeout=600, store_widget_state=True)
        written.append(write_deck(nb, path.stem, out_dir))
        print(f"  {written[-1].name}  ({seconds:.1f} s to run the notebook)", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build reveal.js decks from the notebooks (offline).")
    parser.add_argument("notebooks", nargs="*", help="notebook stems (default: every topic notebook)")
    parser.add_argument("--out", type=Path, default=ROOT / "slides")
    parser.add_argument("--mark", action="store_true", help="write the cells' slide metadata instead of building")
    args = parser.parse_args(argv)
    if args.mark:
        for path in collection_paths():
            if not args.notebooks or path.stem in args.notebooks:
                print(f"  {path.name}: {mark(path)} cells marked")
        return 0
    try:
        written = build(args.notebooks or None, args.out)
        if not CHROMIUM.exists():  # a laptop without Debian's Chromium still gets its decks, unmeasured
            print(f"slides: wrote {len(written)} decks to {args.out}, NOT measured: no Chromium at {CHROMIUM} (each "
                  "deck still zooms a full slide out to fit)", file=sys.stderr)
            return 0
        too_full = {deck: lines for deck, lines in measure(written).items() if lines}
    except (FileNotFoundError, ValueError) as err:
        print(f"slides: {err}", file=sys.stderr)
        return 1
    if too_full:
        print("slides: these slides do not fit 1280 x 720, even zoomed out to "
              f"{MIN_ZOOM}:\n" + "\n".join(f"  {deck}: {line}" for deck, lines in too_full.items() for line in lines),
              file=sys.stderr)
        return 1
    print(f"wrote {len(written)} decks to {args.out}, every slide measured to fit 1280 x 720 "
          "(open one in a browser; S shows the speaker notes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
