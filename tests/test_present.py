"""`make present`: each topic notebook as a lecture (qalib.tools.present). The lecture leaves out the live training
runs and what reads them, the set-up prose, the drill and the references; it executes top to bottom on its own."""

import re

import nbformat
import pytest

from qalib.tools.nbtools import collection_paths, execute, is_topic
from qalib.tools.present import LEFT_OUT_SECTIONS, LIVE_DEMOS, LIVE_RUN, _names, lecture_notebook, live_cells, section_titles

TOPICS = [p for p in collection_paths() if is_topic(p)]


def test_a_cells_inputs_are_the_names_it_reads_before_binding_them():
    bound, free = _names("x = x + 1\nfig = plt.figure()\nfig.add(y)\nz = [s for s in S if s > t]\n"
                         "for r in R:\n    print(r, w)\ndef f(a):\n    b = 2\n    return a + b + c\n%matplotlib inline\n")
    assert bound == {"x", "fig", "z", "r", "f"}
    assert free == {"x", "plt", "y", "S", "t", "R", "print", "w", "c"}


def test_what_reads_a_live_run_is_left_out_until_a_kept_cell_binds_it_again():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · Title"),
        nbformat.v4.new_code_cell("res = train()", metadata={"tags": [LIVE_RUN]}),
        nbformat.v4.new_code_cell("acc = res.accuracy"),          # reads the run: out
        nbformat.v4.new_code_cell("print(acc.mean())"),           # reads what read it: out
        nbformat.v4.new_code_cell("acc = reference().accuracy"),  # binds acc anew: kept
        nbformat.v4.new_code_cell("plot(acc)"),                   # kept
    ])
    assert live_cells(nb) == [1, 2, 3]


@pytest.mark.parametrize("path", TOPICS, ids=[p.stem for p in TOPICS])
def test_every_topic_notebook_has_a_lecture_without_its_live_runs_drill_or_references(path):
    nb = nbformat.read(path, as_version=4)
    tagged = any(LIVE_RUN in c.metadata.get("tags", []) for c in nb.cells)
    assert tagged != (path.stem in LIVE_DEMOS), (f"{path.name}: tag its live run `{LIVE_RUN}`, or list it in "
                                                 "LIVE_DEMOS if its demos run on the live models (not both)")
    lecture = lecture_notebook(nb)
    text = "\n".join(c.source for c in lecture.cells)
    for section in LEFT_OUT_SECTIONS:
        assert not re.search(rf"^## (\d+\s*[·.]\s*)?{section}\s*$", text, re.M), f"the lecture shows '{section}'"
    assert not re.search(r"^quiz\(", text, re.M), "the lecture shows the quiz"
    assert "display(HTML(" in lecture.cells[0].source and "qalib-sections" in lecture.cells[0].source
    shown = section_titles(lecture)
    assert shown == section_titles(nb) and len(shown) >= 3, shown
    sources = [c.source for c in lecture.cells if c.cell_type == "code"]
    assert not any(nb.cells[i].source in sources for i in live_cells(nb))


# A lecture that keeps its live run (LIVE_DEMOS) leaves out only prose and the quiz's call, which nothing reads:
# running the notebook itself (tests/test_notebooks.py) covers it, at a minute or more each.
LEFT_OUT_RUNS = [p for p in TOPICS if p.stem not in LIVE_DEMOS]


@pytest.mark.notebook
@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", LEFT_OUT_RUNS, ids=[p.stem for p in LEFT_OUT_RUNS])
def test_every_lecture_without_its_live_run_executes_top_to_bottom(path, tmp_path):
    """No kept cell reads a name only a left-out cell bound: the lecture runs on its own, in a fresh kernel."""
    target = tmp_path / path.name
    nbformat.write(lecture_notebook(nbformat.read(path, as_version=4)), target)
    nb, seconds = execute(target, timeout=240, env_cwd=path.parent)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
