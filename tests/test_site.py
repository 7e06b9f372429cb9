"""The static site renders widgets from saved state into plain HTML (no kernel, no CDN)."""

import base64
import re

import nbformat

from qalib.tools.site import MATHJAX_URL, copy_mathjax, index_page, offline_exporter, render_widget, staticize

PNG = base64.b64encode(b"\x89PNG fake").decode()
STATE = {
    "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider", "IPY_MODEL_img", "IPY_MODEL_html"]}},
    "slider": {"model_name": "FloatLogSliderModel", "state": {"description": "d_k", "value": 64.0}},
    "img": {"model_name": "ImageModel", "state": {"format": "png", "width": "400"},
            "buffers": [{"path": ["value"], "data": PNG, "encoding": "base64"}]},
    "html": {"model_name": "HTMLModel", "state": {"value": "<b>note</b>"}},
}


def test_render_widget_tree():
    out = render_widget("box", STATE)
    assert "<b>d_k</b> 64" in out and f"base64,{PNG}" in out and "<b>note</b>" in out and "width='400'" in out


def test_staticize_replaces_views_and_drops_state():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("demo")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": "box", "version_major": 2, "version_minor": 0}})]
    nb.cells.append(cell)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": STATE}}
    assert staticize(nb) == 1
    assert "widgets" not in nb.metadata and "text/html" in nb.cells[0].outputs[0]["data"]


def test_index_lists_built_notebooks_with_short_answers():
    page = index_page({"01_scaled_attention": (12.0, 9)})
    assert "01_scaled_attention.html" in page and "sqrt(d_k)" in page and "9 claims" in page
    assert "02_sin_cos_positions.html" not in page


def math_page(out_dir):
    """A one-cell page with a formula, as `make site` writes it (with the site's MathJax next to it)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("Divide by $\\sqrt{d_k}$: $$q \\cdot k$$")])
    body, _ = offline_exporter().from_notebook_node(nb)
    copy_mathjax(out_dir / "mathjax")
    (out_dir / "math.html").write_text(body, encoding="utf-8")
    return body


def test_pages_fetch_no_script_from_the_network_and_mathjax_is_beside_them(tmp_path):
    body = math_page(tmp_path)
    sources = re.findall(r"<script[^>]*\bsrc=[\"']([^\"']+)", body) + re.findall(r"import[^;]*from [\"'](http[^\"']+)", body)
    assert sources == [MATHJAX_URL], sources
    script, config = MATHJAX_URL.split("?config=")
    assert (tmp_path / script).is_file()
    assert all((tmp_path / "mathjax" / "config" / f"{name}.js").is_file() for name in config.split(","))


def test_the_drill_comes_from_its_data_with_every_answer_folded():
    from qalib.practice import quiz
    from qalib.tools.site import drill_html

    drill = quiz.load("01_scaled_attention")
    page = drill_html("01_scaled_attention")
    folded = "".join(re.findall(r"<details>.*?</details>", page, flags=re.S))
    unfolded = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    for f in drill.follow_ups:
        words = re.sub(r"[^A-Za-z ]", " ", f.answer).split()[:4]
        assert all(w in folded for w in words)
    for q in drill.questions:
        assert q.options[q.answer] in folded
        assert q.explanation[:30] not in unfolded  # the explanation is inside its fold only
    assert unfolded.count("<li>") == len(drill.follow_ups) + sum(len(q.options) + 1 for q in drill.questions)


def test_staticize_finds_the_real_drill_view_by_its_class():
    import ipywidgets as W

    from qalib.practice import quiz

    view = quiz.quiz("01_scaled_attention", seed=0)
    state = {k: v for k, v in W.Widget.get_manager_state(drop_defaults=False)["state"].items()}
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("quiz('01_scaled_attention')")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": view.widget.model_id, "version_major": 2,
                                                     "version_minor": 0}})]
    nb.cells.append(cell)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    assert staticize(nb, "01_scaled_attention") == 1
    assert "<details><summary>Our answer</summary>" in nb.cells[0].outputs[0]["data"]["text/html"]
