"""How a statement appears on the page: one quiet line, its details one click away.

In a Jupyter kernel (JupyterLab, Voila, nbclient) a measurement is shown as a collapsed <details> element: the mark
and the claim (and the value, when it is short) on one line; the measured value in full, its arrays and thresholds,
behind a click. The identities of one cell collapse into a single line ("≡ 3 derivations checked"), each one behind
the click. The plain-text form of the same output is the full line claims.py has always printed, so a headless
reader (tests, robustness, text export) sees exactly what it saw before. Outside a kernel the line is printed.

    claim_html(result)              -> the <details> element of one CheckedClaim (pure)
    identities_html(results)        -> the one-line <details> element of a cell's identities (pure)
    show(result)                    -> print, or publish to the kernel's front end
"""

from __future__ import annotations

import html

SHORT_VALUE = 48       # a measured value this short (one line) is shown beside the claim, not behind the click
CLAIM_METADATA = {"qalib": "claims"}  # marks these outputs for tools that read notebooks (slides, counts)

_STYLE = ("margin:1px 0;font-size:0.92em;color:#333", "cursor:pointer;list-style-position:inside",
          "margin:2px 0 4px 1.6em;padding:4px 8px;background:#f6f6f6;white-space:pre-wrap;font-size:0.9em")


def _details(summary: str, body: str) -> str:
    box, head, inner = _STYLE
    return (f'<details class="qalib-claim" style="{box}"><summary style="{head}">{summary}</summary>'
            f'<div style="{inner}">{body}</div></details>')


def claim_html(result) -> str:
    """One measurement (or one identity) as a collapsed line; every piece of text is escaped."""
    from qalib.notebook.claims import FAILED, IDENTITY, TICK, format_value

    value = format_value(result.measured)
    if result.kind == "identity":
        mark, word = (IDENTITY if result.holds else FAILED), "checked"
    else:
        mark, word = (TICK if result.holds else FAILED), "measured"
    line = f"{mark} {html.escape(result.claim)}"
    if len(value) <= SHORT_VALUE and "\n" not in value:  # nothing more to show: the value sits on the line
        return f'<div class="qalib-claim" style="{_STYLE[0]}">{line} <span style="color:#666">— {html.escape(value)}</span></div>'
    return _details(line, f"{word}: {html.escape(value)}")


def identities_html(results) -> str:
    """A cell's identities as one line: one identity as itself; several as "≡ n derivations checked", each one
    (claim and value) behind the click."""
    from qalib.notebook.claims import FAILED, IDENTITY, format_value

    results = list(results)
    if not results:
        raise ValueError("identities_html needs at least one identity")
    if len(results) == 1:
        return claim_html(results[0])
    mark = IDENTITY if all(r.holds for r in results) else FAILED
    summary = (f"{mark} {len(results)} derivations checked numerically "
               '<span style="color:#666">(they guard the code; not evidence)</span>')
    body = "<br>".join(f"{IDENTITY if r.holds else FAILED} {html.escape(r.claim)} — checked: "
                       f"{html.escape(format_value(r.measured))}" for r in results)
    return _details(summary, body)


# The identities shown so far in the running cell: (cell number, display handle, results).
_group: dict = {}


def _kernel_cell() -> int | None:
    """The running cell's number when this process is a Jupyter kernel with a front end, else None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    return int(shell.execution_count)


def show(result) -> None:
    """Print the statement's line (outside a kernel), or publish it as a quiet, collapsed element (in one)."""
    cell = _kernel_cell()
    if cell is None:
        print(result)
        return
    from IPython.display import display

    if result.kind != "identity":
        display({"text/plain": str(result), "text/html": claim_html(result)}, raw=True, metadata=CLAIM_METADATA)
        return
    if _group.get("cell") == cell:
        _group["results"].append(result)
        _group["handle"].update({"text/plain": "\n".join(str(r) for r in _group["results"]),
                                 "text/html": identities_html(_group["results"])}, raw=True, metadata=CLAIM_METADATA)
        return
    handle = display({"text/plain": str(result), "text/html": claim_html(result)}, raw=True,
                     metadata=CLAIM_METADATA, display_id=True)
    _group.clear()
    _group.update(cell=cell, handle=handle, results=[result])
