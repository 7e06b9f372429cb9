"""`make site`: execute every notebook headless and write a static HTML site that needs no kernel.

    python -m qalib.tools.site [--out site] [--only 01_scaled_attention ...]

site/index.html lists the questions with their short answers (qalib.notebook.catalog); site/<notebook>.html shows
each notebook with its outputs. Widgets are rendered to plain HTML from the state they were left in
(the figure of each demo as an image, each control as its value); the drill comes from its data file, each
answer folded until the reader opens it (no kernel needed); and formulas are typeset by the site's
own copy of MathJax (site/mathjax/, from the jupyter-server-mathjax package), so pages read offline:
nothing is loaded from a CDN.
"""

from __future__ import annotations

import argparse
import html
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.filters import markdown2html

from qalib.notebook.catalog import CATALOG
from qalib.notebook.paths import ROOT
from qalib.practice import quiz
from qalib.tools.nbtools import collection_paths, execute, ticks

TEMPLATES = Path(__file__).parent / "site_templates"
MATHJAX_URL = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"  # relative: the pages sit next to mathjax/
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def render_widget(model_id: str, state: dict, depth: int = 0) -> str:
    """Static HTML for one widget model and its children, from a notebook's saved widget state."""
    model = state.get(model_id)
    if model is None or depth > 20:
        return ""
    name, s = model["model_name"], model["state"]
    desc = html.escape(str(s.get("description", "")))
    if name in ("VBoxModel", "HBoxModel", "BoxModel"):
        direction = "row" if name == "HBoxModel" else "column"
        inner = "".join(render_widget(c.removeprefix("IPY_MODEL_"), state, depth + 1) for c in s.get("children", []))
        return f"<div style='display:flex;flex-direction:{direction};flex-wrap:wrap;gap:0.6em'>{inner}</div>"
    if name == "ImageModel":
        data = next((b["data"] for b in model.get("buffers", []) if b["path"] == ["value"]), None)
        if not data:
            return ""
        width = f" width='{s['width']}'" if s.get("width") else ""
        return f"<img style='max-width:100%' src='data:image/{s.get('format', 'png')};base64,{data}'{width}>"
    if name in ("HTMLModel", "HTMLMathModel"):
        return f"<div>{s.get('value', '')}</div>"  # our own HTML, produced by qalib
    if name == "LabelModel":
        return f"<span>{html.escape(str(s.get('value', '')))}</span>"
    if name.endswith("SliderModel") or name.endswith("TextModel") or name in ("CheckboxModel", "ToggleButtonModel"):
        value = s.get("value")
        if name == "FloatLogSliderModel" or isinstance(value, float):
            value = f"{value:.4g}"
        return f"<span class='qalib-control'><b>{desc}</b> {html.escape(str(value))}</span>"
    if name in ("DropdownModel", "RadioButtonsModel", "ToggleButtonsModel", "SelectModel", "SelectionSliderModel"):
        labels, index = s.get("_options_labels", []), s.get("index")
        chosen = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else "(none)"
        if name == "RadioButtonsModel" and depth:  # a quiz question: list the options, answers stay hidden
            items = "".join(f"<li>{html.escape(o)}</li>" for o in labels)
            return f"<ul>{items}</ul>"
        return f"<span class='qalib-control'><b>{desc}</b> {html.escape(str(chosen))}</span>"
    if name == "ButtonModel":
        return ""  # buttons do nothing without a kernel
    return ""


def _has_class(model_id: str, state: dict, css_class: str, depth: int = 0) -> bool:
    """Whether a widget or one of its children carries a CSS class (quiz.FollowUps marks itself "qalib-drill")."""
    model = state.get(model_id)
    if model is None or depth > 20:
        return False
    s = model["state"]
    return css_class in s.get("_dom_classes", ()) or any(
        _has_class(c.removeprefix("IPY_MODEL_"), state, css_class, depth + 1) for c in s.get("children", []))


def drill_html(notebook: str) -> str:
    """A notebook's drill as static HTML, read from its data file: each follow-up's answer and each quiz question's
    answer sit folded in a <details> that the reader opens, so the page still lets them answer first."""
    drill = quiz.load(notebook)

    def md(text: str) -> str:
        return markdown2html(text.strip())

    follow = "".join(
        f"<li>{md(f.question)}<details><summary>Our answer</summary>{md(f'**{f.short}**')}"
        f"<details><summary>more</summary>{md(f.answer)}</details>"
        f"{md(quiz.section_link(f.section))}</details></li>" for f in drill.follow_ups)
    questions = "".join(
        f"<li>{md(q.prompt)}<ol type='a'>{''.join(f'<li>{md(o)}</li>' for o in q.options)}</ol>"
        f"<details><summary>Answer</summary>{md(f'**{q.options[q.answer]}** ' + q.explanation)}"
        f"{md(quiz.section_link(q.section)) if q.section else ''}</details></li>" for q in drill.questions)
    return (f"<div class='qalib-drill'><b>Follow-ups an interviewer asks next</b><ol>{follow}</ol>"
            f"<b>Self-check</b><ol>{questions}</ol></div>")


def staticize(nb, notebook: str | None = None) -> int:
    """Replace widget views in outputs by static HTML; drop the widget state. The drill's view becomes
    drill_html(notebook) when the notebook is named. Returns how many views were replaced."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view:
                if notebook and _has_class(view["model_id"], state, "qalib-drill"):
                    static = drill_html(notebook)
                else:
                    static = render_widget(view["model_id"], state)
                out["data"] = {"text/html": static or "<i>(interactive widget: open the notebook to use it)</i>"}
                replaced += 1
    nb.metadata.pop("widgets", None)
    return replaced


INDEX_STYLE = """body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;line-height:1.5}
h1{font-size:1.8em}.q{margin:1.2em 0;padding:0.8em 1em;border-left:4px solid #2166ac;background:#f7f7f7}
.q a{font-weight:bold;font-size:1.1em}.meta{color:#555;font-size:0.9em}"""


def index_page(built: dict[str, tuple[float, int]]) -> str:
    items = []
    for entry in CATALOG:
        stem = entry.file.removesuffix(".ipynb")
        if stem not in built:
            continue
        secs, n = built[stem]
        items.append(
            f"<div class='q'><a href='{stem}.html'>{html.escape(entry.question)}</a>"
            f"<p>{html.escape(entry.short_answer)}</p>"
            f"<p class='meta'>Play with: {html.escape(entry.play_with)} · {n} claims checked in this build "
            f"({secs:.0f} s)</p></div>"
        )
    start = "<p><a href='00_start_here.html'>Start here</a>: how to use the collection.</p>" if "00_start_here" in built else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>qalib: overlooked questions about Transformers"
            f"</title><style>{INDEX_STYLE}</style></head><body><h1>Overlooked questions about Transformers</h1>{start}"
            f"{''.join(items)}<p class='meta'>Built {time.strftime('%Y-%m-%d %H:%M')} by executing every notebook.</p>"
            f"</body></html>")


def copy_mathjax(dest: Path) -> None:
    """MathJax 2.7's files (12 MB) next to the pages, once: the pages load it by a relative URL."""
    import jupyter_server_mathjax

    if not (dest / "MathJax.js").exists():
        shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", dest, dirs_exist_ok=True)


def offline_exporter() -> HTMLExporter:
    """nbconvert's lab page, with MathJax from the site's own copy and no other script fetched from a CDN."""
    return HTMLExporter(template_name="lab", template_file="offline.html.j2", extra_template_paths=[str(TEMPLATES)],
                        mathjax_url=MATHJAX_URL)


def build(out_dir: Path, only: list[str] | None = None) -> dict[str, tuple[float, int]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    copy_mathjax(out_dir / "mathjax")
    exporter = offline_exporter()
    built = {}
    for path in collection_paths():
        if only and path.stem not in only:
            continue
        nb, secs = execute(path, timeout=600, store_widget_state=True)
        staticize(nb, path.stem if path.stem in quiz.available() else None)
        body, _ = exporter.from_notebook_node(nbformat.from_dict(nb))
        (out_dir / f"{path.stem}.html").write_text(body, encoding="utf-8")
        built[path.stem] = (secs, ticks(nb))
        print(f"  {path.stem}.html  ({secs:.1f} s, {built[path.stem][1]} claims)", flush=True)
    (out_dir / "index.html").write_text(index_page(built), encoding="utf-8")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Execute every notebook and write a static HTML site.")
    parser.add_argument("--out", type=Path, default=ROOT / "site")
    parser.add_argument("--only", nargs="*", help="notebook stems to build (default: all)")
    args = parser.parse_args(argv)
    built = build(args.out, args.only)
    print(f"wrote {len(built)} pages and index.html to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
