"""The reveal.js decks: boundaries carried by the notebooks' cells, the deck rewrite, and an offline page.
(The browser test opens a built deck with the network blocked.)"""

import re

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from qalib.tools import slides
from qalib.tools.nbtools import collection_paths, is_topic

TOPICS = [p for p in collection_paths() if is_topic(p)]


@pytest.mark.parametrize("path", TOPICS, ids=[p.stem for p in TOPICS])
def test_every_cell_carries_its_slide_boundary(path):
    nb = nbformat.read(path, as_version=4)
    unmarked = [i for i, c in enumerate(nb.cells) if "slide_type" not in c.metadata.get("slideshow", {})]
    assert not unmarked, f"{path.name}: cells {unmarked} have no slide metadata; run python -m qalib.tools.slides --mark"


def test_boundaries_follow_the_headings():
    assert slides.slide_type_for(new_markdown_cell("## 3 · The argument\ntext")) == "slide"
    assert slides.slide_type_for(new_markdown_cell("\n### 3.1 A step")) == "subslide"
    assert slides.slide_type_for(new_markdown_cell("More text, $x$.")) == "-"
    assert slides.slide_type_for(new_code_cell("import qalib\nqalib.use_style()")) == "skip"
    assert slides.slide_type_for(new_code_cell("plot_thing(fig)")) == "-"


def test_the_slide_keeps_heading_formulas_and_bold_leads_and_the_notes_keep_the_prose():
    source = ("### 3.1 Variance\nThe variance grows. It is $d_k$.\n\n$$\\mathrm{Var}(q\\cdot k) = d_k$$\n\n"
              "**Prediction.** It will saturate. Then more words follow.")
    shown, notes = slides.split_markdown(source)
    assert shown.splitlines()[0] == "### 3.1 Variance"
    assert "$$\\mathrm{Var}(q\\cdot k) = d_k$$" in shown and "**Prediction.** It will saturate." in shown
    assert "Then more words" not in shown and "The variance grows" not in shown
    assert "The variance grows" in notes and "Then more words follow." in notes and "$$" not in notes


def executed_notebook():
    claim = new_output("stream", name="stdout", text="✓ a claim — measured: 1\n{'a dict': 1}\n")
    figure = new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    cells = [new_markdown_cell("# 01 · A question\n\n**Short answer.** Yes."),
             new_code_cell("import qalib", outputs=[]),
             new_markdown_cell("## 3 · The argument\nProse here."),
             new_code_cell("check(...)", outputs=[claim, figure]),
             new_code_cell("x = 1", outputs=[new_output("execute_result", data={"text/plain": "1"}, execution_count=1)]),
             new_markdown_cell("## 8 · Interview drill\nSay it aloud."),
             new_code_cell('quiz("01_scaled_attention")', outputs=[])]
    for c in cells:
        c.metadata["slideshow"] = {"slide_type": slides.slide_type_for(c)}
    return new_notebook(cells=cells)


def test_the_deck_drops_setup_code_and_clutter_and_turns_the_drill_into_fragments():
    deck = slides.deck_notebook(executed_notebook(), "01_scaled_attention")
    kinds = [c.metadata["slideshow"]["slide_type"] for c in deck.cells]
    sources = [c.source for c in deck.cells]
    assert "import qalib" not in sources and "x = 1" not in sources     # set-up skipped, no-output cell dropped
    code = next(c for c in deck.cells if c.cell_type == "code")
    assert not [o for o in code.outputs if o.output_type == "stream"]          # no check line on the slide...
    badges = [c.source for c in deck.cells if "qalib-badge" in c.source]
    assert badges == ["<p class='qalib-badge'>✓ 1 measured</p>"]                # one badge for the slide
    after = deck.cells[deck.cells.index(code) + 1]                              # ...its text is in the notes
    assert after.metadata["slideshow"]["slide_type"] == "notes" and "✓ a claim — measured: 1" in after.source
    assert any("image/png" in o.get("data", {}) for o in code.outputs)
    assert any(k == "notes" and "Prose here." in src for k, src in zip(kinds, sources))
    follow = [s for s in sources if s.startswith("### Follow-up")]
    assert follow and kinds.count("fragment") == len(follow)


def test_a_lead_sentence_never_ends_inside_a_formula():
    text = "**Task.** Random symbols $x_t \\in \\{1, \\dots, m\\}$, e.g. $m = 4.5$, repeat. Then more."
    assert slides.lead_sentence(text) == "**Task.** Random symbols $x_t \\in \\{1, \\dots, m\\}$, e.g. $m = 4.5$, repeat."
    assert slides.lead_sentence("**Prediction.** It saturates") == "**Prediction.** It saturates"
    assert slides.lead_sentence("No bold lead.") is None


def test_a_second_figure_under_one_heading_continues_on_a_sub_slide():
    nb = executed_notebook()
    figure = new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    second = new_code_cell("plot_more(fig)", outputs=[figure], metadata={"slideshow": {"slide_type": "-"}})
    nb.cells.insert(4, second)
    deck = slides.deck_notebook(nb, "01_scaled_attention")
    kinds = [c.metadata["slideshow"]["slide_type"] for c in deck.cells]
    figures = [i for i, c in enumerate(deck.cells) if c.cell_type == "code" and slides.has_figure(c)]
    assert len(figures) == 2
    before = deck.cells[figures[1] - 1]
    assert before.source == "### 3 · The argument (continued)" and kinds[figures[1] - 1] == "subslide"
    # the first figure stays on its heading's slide
    assert kinds[figures[0]] == "-" and all(k != "subslide" for k in kinds[:figures[0]])


def test_a_cell_without_slide_metadata_is_named():
    nb = executed_notebook()
    del nb.cells[2].metadata["slideshow"]
    with pytest.raises(ValueError, match="cell 2 has no slideshow metadata"):
        slides.deck_notebook(nb, "01_scaled_attention")


def test_the_deck_page_loads_nothing_from_a_network():
    body, _ = slides.exporter().from_notebook_node(slides.deck_notebook(executed_notebook(), "01_scaled_attention"))
    urls = re.findall(r"""(?:src|href)=["']([^"'#][^"']*)""", body)
    external = [u for u in urls if re.match(r"[a-z]+://|//", u)]
    assert not external, external
    assert "revealjs/dist/reveal.js" in urls and any(u.startswith("mathjax/MathJax.js") for u in urls)
    assert "require.js" not in body and "jquery" not in body.lower()


def test_reveal_js_comes_from_the_installed_package():
    source = slides.reveal_source()
    assert (source / "dist" / "reveal.js").is_file() and (source / "plugin" / "notes" / "notes.js").is_file()


def test_an_unknown_notebook_is_named(tmp_path):
    with pytest.raises(ValueError, match="no topic notebook named \\['99_nope'\\]"):
        slides.build(["99_nope"], tmp_path)


def test_a_heading_inside_a_cell_starts_its_own_slide_and_the_setup_section_is_left_out():
    nb = executed_notebook()
    nb.cells[2] = new_markdown_cell("## 3 · The argument\nProse here.\n\n### 3.1 A step\nMore.\n\n## 4 · Myth check\nA myth.",
                                    metadata={"slideshow": {"slide_type": "slide"}})
    nb.cells.insert(1, new_markdown_cell("## Set-up", metadata={"slideshow": {"slide_type": "slide"}}))
    deck = slides.deck_notebook(nb, "01_scaled_attention")
    shown = [(c.metadata["slideshow"]["slide_type"], c.source.splitlines()[0]) for c in deck.cells
             if c.metadata["slideshow"]["slide_type"] in ("slide", "subslide")]
    assert ("subslide", "### 3.1 A step") in shown and ("slide", "## 4 · Myth check") in shown
    assert not any("Set-up" in c.source for c in deck.cells)


def test_the_title_slide_shows_the_question_and_the_30_second_answer():
    source = ("# 01 · A question\n\n**The question.** *Why?*\n\n✓ a measurement · ≡ a derivation\n\n"
              "**The answer in 30 seconds.** Because.\n\n**The longer answer.** Because, at length.")
    shown, notes = slides.title_slide(source)
    assert shown == "# 01 · A question\n\n**The question.** *Why?*\n\n**The answer in 30 seconds.** Because."
    assert "The longer answer" in notes and "✓ a measurement" in notes


def test_the_badge_counts_each_kind_of_statement():
    lines = ["✓ a — measured: 1", "✓ b — measured: 2", "≡ identity: c — checked: 0", "❝ quoted: d — e"]
    assert slides.statement_badge(lines) == "✓ 2 measured · ≡ 1 derived · ❝ 1 quoted"
    assert slides.statement_badge(lines[2:3]) == "≡ 1 derived"


def test_one_badge_per_slide_counts_all_its_cells_statements():
    nb = executed_notebook()
    identity = new_output("stream", name="stdout", text="≡ identity: x — checked: 1\n")
    nb.cells.insert(4, new_code_cell("identity(...)", outputs=[identity], metadata={"slideshow": {"slide_type": "-"}}))
    deck = slides.deck_notebook(nb, "01_scaled_attention")
    badges = [c.source for c in deck.cells if "qalib-badge" in c.source]
    assert badges == ["<p class='qalib-badge'>✓ 1 measured · ≡ 1 derived</p>"]
