"""`make present`: a topic notebook as a lecture, served by Voila.

    python -m qalib.tools.present 01_scaled_attention [--out build/present]   # writes the lecture notebook

The lecture is the notebook itself, rewritten for a room (the notebook is not changed):
- its live training runs are left out: the cells tagged `live-run` and every later cell that reads what they made
  (found from the code's names). The lesson is shown from the reference runs, which the notebook already reads and
  plots, so the page shows its first demo within seconds instead of re-training. Where the demos themselves run on
  the live models (LIVE_DEMOS), the run stays, and what comes before it shows while it trains;
- no check lines, printed logs or warnings (hidden by the page's style: the claims are still made, and a false one
  still stops its cell), no set-up heading, no interview drill, no references;
- prose and controls at talk size, figures in the talk style (QALIB_STYLE=talk), and a bar of section links at the
  top (keys: n / p for the next / previous section).
`make present NB=01_scaled_attention` writes it and serves it with Voila, rendering each cell as it runs.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

from qalib.notebook.paths import ROOT
from qalib.tools.nbtools import collection_paths, is_topic

LIVE_RUN = "live-run"  # the tag of a cell that trains the notebook's live models
# Notebooks whose demos and figures run on the models (or tokenizers) trained live: their lecture keeps the run, and
# the cells before it show while it trains.
LIVE_DEMOS = {
    "12_decoding": "the sampling and causal-mask demos decode with the models it trains",
    "14_cross_attention": "the alignment demo and every figure read the encoder-decoders it trains",
    "15_tokenization": "the tokenizer and table demos use the vocabularies it trains",
    "17_fine_tuning": "the movement and span demos show the fine-tuning runs it makes",
    "18_attention_explanation": "the adversarial-attention demo searches the models it trains",
}
LEFT_OUT_SECTIONS = ("Set-up", "Interview drill", "References")  # '##' sections the lecture does not show
SECTION = re.compile(r"^## (?:\d+\s*[·.]\s*)?(.+?)\s*$", re.M)

# The page's style. The claims' elements carry the class qalib-claim (qalib.notebook.quiet); printed text is an
# output of the stdout or stderr type.
LECTURE_STYLE = """<style>
.jp-RenderedHTMLCommon { font-size: 22px !important; line-height: 1.45; }
.jp-RenderedHTMLCommon h1 { font-size: 40px !important; }
.jp-RenderedHTMLCommon h2 { font-size: 32px !important; margin-top: 1.6em; scroll-margin-top: 56px; }
.jp-RenderedHTMLCommon h3 { font-size: 26px !important; }
:root { --jp-widgets-font-size: 20px; --jp-widgets-inline-height: 36px; --jp-widgets-inline-label-width: 11em;
        --jp-widgets-inline-width: 34em; --jp-ui-font-size1: 18px; }
.qalib-claim, details.qalib-claim,
.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"],
.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"] { display: none !important; }
#qalib-sections { position: fixed; top: 0; left: 0; right: 0; z-index: 100; background: #fff;
                  border-bottom: 1px solid #ccc; padding: 8px 1em; font-size: 18px; }
#qalib-sections a { margin-right: 1.4em; text-decoration: none; cursor: pointer; }
body { padding-top: 48px; }
</style>"""

# The section bar: the k-th link scrolls to the k-th '##' heading (Voila renders each as an <h2>, the title as the
# <h1>); keys n / p go to the next / previous one. It runs in the browser: a code cell's Javascript output.
LECTURE_SCRIPT = """
(() => {
  const labels = LABELS;
  const heads = () => Array.from(document.querySelectorAll(".jp-RenderedHTMLCommon h2"));
  const scroller = (el) => {  // the element that scrolls the page (Voila's, or the document's)
    for (let p = el.parentElement; p; p = p.parentElement) {
      const y = getComputedStyle(p).overflowY;
      if ((y === "auto" || y === "scroll") && p.scrollHeight > p.clientHeight) return p;
    }
    return document.scrollingElement;
  };
  const go = (h) => {  // the heading just below the bar
    if (!h) return;
    const box = scroller(h);
    box.scrollTop += h.getBoundingClientRect().top - document.getElementById("qalib-sections").offsetHeight - 8;
  };
  if (!document.getElementById("qalib-sections")) {
    const bar = document.createElement("nav");
    bar.id = "qalib-sections";
    labels.forEach((label, k) => {
      const a = document.createElement("a");
      a.textContent = label;
      a.dataset.section = String(k);
      a.addEventListener("click", () => go(heads()[k]));
      bar.appendChild(a);
    });
    document.body.prepend(bar);
    document.addEventListener("keydown", (e) => {
      if (e.target.closest && e.target.closest("input, textarea, select, [contenteditable]")) return;
      if (e.key !== "n" && e.key !== "p") return;
      const tops = heads().map((h) => h.getBoundingClientRect().top);
      const k = e.key === "n" ? tops.findIndex((t) => t > 80) : tops.map((t) => t < 30).lastIndexOf(true);
      go(heads()[k]);
    });
  }
})();
"""


def _label(title: str) -> str:
    """A section's name in the bar: its title before any colon, without formulas."""
    return re.sub(r"\$[^$]*\$", "", title.split(":")[0]).strip()


def section_titles(nb) -> list[str]:
    """The '##' sections the lecture shows, in order."""
    return [m.group(1) for cell in nb.cells if cell.cell_type == "markdown"
            for m in SECTION.finditer(cell.source) if m.group(1) not in LEFT_OUT_SECTIONS]


class _FreeNames(ast.NodeVisitor):
    """The names a cell binds, and those it reads before binding them (its inputs from earlier cells), visiting
    each statement in the order Python evaluates it (an assignment's value before its targets). Names a function,
    lambda or comprehension binds for itself are its own, not the notebook's."""

    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.free: set[str] = set()
        self.local: list[set[str]] = []

    def visit_Name(self, node: ast.Name) -> None:
        if any(node.id in scope for scope in self.local):
            return
        if isinstance(node.ctx, ast.Load):
            if node.id not in self.bound:
                self.free.add(node.id)
        else:
            self.bound.add(node.id)

    def visit_Assign(self, node) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node) -> None:  # x += 1 reads x
        if isinstance(node.target, ast.Name) and node.target.id not in self.bound:
            self.free.add(node.target.id)
        self.visit(node.value)
        self.visit(node.target)

    def visit_AnnAssign(self, node) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for stmt in (*node.body, *node.orelse):
            self.visit(stmt)

    def visit_Import(self, node) -> None:
        self.bound.update((a.asname or a.name).split(".")[0] for a in node.names)

    visit_ImportFrom = visit_Import

    def _scoped(self, names: set[str], body) -> None:
        self.local.append(names)
        for part in body:
            self.visit(part)
        self.local.pop()

    def visit_FunctionDef(self, node) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self.bound.add(node.name)
        inner = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        inner |= {n.id for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
        self._scoped(inner, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node) -> None:
        self.bound.add(node.name)
        self._scoped(set(), node.body)

    def visit_Lambda(self, node) -> None:
        self._scoped({a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}, [node.body])

    def _comprehension(self, node) -> None:
        self.visit(node.generators[0].iter)  # evaluated outside the comprehension's scope
        inner = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        parts = [g.iter for g in node.generators[1:]] + [c for g in node.generators for c in g.ifs]
        parts += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        self._scoped(inner, parts)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it reads from earlier cells), from its code (IPython's syntax made Python)."""
    from IPython.core.inputtransformer2 import TransformerManager

    names = _FreeNames()
    names.visit(ast.parse(TransformerManager().transform_cell(source)))
    return names.bound, names.free - {"get_ipython"}  # a magic becomes a call of it; every kernel has it


def live_cells(nb) -> list[int]:
    """The code cells a lecture leaves out: those tagged live-run, and every later one that reads a name they bound
    (and so on, down the notebook), unless a kept cell bound that name again in between."""
    stale: set[str] = set()
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        bound, read = _names(cell.source)
        if LIVE_RUN in cell.metadata.get("tags", []) or read & stale:
            out.append(i)
            stale |= bound
        else:
            stale -= bound
    return out


def _without_sections(source: str, titles: tuple[str, ...]) -> str:
    """A markdown cell's text without the '##' sections named (from the heading to the next '##' heading)."""
    parts = re.split(r"(?m)^(?=## )", source)
    kept = [p for p in parts if not ((m := SECTION.match(p)) and m.group(1) in titles)]
    return "".join(kept)


def lecture_notebook(nb):
    """The notebook rewritten as a lecture (see the module docstring); `nb` is not changed."""
    nb = copy.deepcopy(nb)
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        raise ValueError("a topic notebook starts with its title cell")
    live = set(live_cells(nb))
    cells, section = [], ""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            opens = [m.group(1) for m in SECTION.finditer(cell.source)]
            if opens:  # a cell's last '##' heading is the section the cells after it belong to
                kept = _without_sections(cell.source, LEFT_OUT_SECTIONS)
                section = opens[-1]
                if kept.strip():
                    cell.source = kept
                    cells.append(cell)
            elif section not in LEFT_OUT_SECTIONS:
                cells.append(cell)
        elif i not in live and section not in LEFT_OUT_SECTIONS[1:]:
            cells.append(cell)  # the set-up's code runs (its prose is not shown); the drill's and references' do not
    labels = json.dumps([_label(t) for t in section_titles(nb)])
    head = nbformat.v4.new_code_cell(
        "from IPython.display import HTML, Javascript, display  # the lecture's style and section bar\n"
        f"display(HTML({LECTURE_STYLE!r}), Javascript({LECTURE_SCRIPT.replace('LABELS', labels)!r}))")
    nb.cells = [head, *cells]
    return nb


def write(stem: str, out_dir: Path) -> Path:
    paths = {p.stem: p for p in collection_paths() if is_topic(p)}
    if stem not in paths:
        raise ValueError(f"no topic notebook named {stem!r}; choose from {sorted(paths)}")
    nb = lecture_notebook(nbformat.read(paths[stem], as_version=4))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{stem}.ipynb"
    nbformat.write(nb, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a topic notebook as a lecture for Voila.")
    parser.add_argument("notebook", help="a topic notebook's stem, e.g. 01_scaled_attention")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "present")
    args = parser.parse_args(argv)
    try:
        print(write(args.notebook, args.out))
    except ValueError as err:
        print(f"present: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
