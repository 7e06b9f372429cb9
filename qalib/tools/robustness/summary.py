"""A sweep's results, one row per claim: how often it held, its worst margin in units of its spread over the runs,
and the runs it failed in; with notes on what the rows cannot show (runs that disagree on their claims, runs
stopped by an error, seeds that did not move). Pure: results in, Markdown out.

The same claim in two runs: the same notebook, the same cell (In [n]), the same place among that cell's
statements, and the same text once every number in it is replaced by '#' (claim texts are often f-strings that
print a run's numbers). Keying on the cell, not on the place in the whole notebook, keeps one cell that checks
more or fewer claims in some run from shifting every later claim.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

NUMBER = re.compile(r"[-+\u2212]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
TEXT_WIDTH = 72   # claim texts are cut to this in the table, which is meant to be pasted into MAINTAINING.md
SHOWN_RUNS = 3    # failed runs listed by name; the rest counted


def normalise(text: str) -> str:
    """The claim's text with every number as '#' and runs of spaces as one."""
    return " ".join(NUMBER.sub("#", text).split())


def claim_key(notebook: str, record: dict) -> tuple:
    return notebook, record.get("cell"), record["order"], normalise(record["claim"])


@dataclass(frozen=True)
class Margin:
    """The smallest margin over the runs, and it divided by the margins' standard deviation over the runs.

    in_spread is None with fewer than 2 margins (no spread to measure), and +-inf (0 for a worst margin of 0) when
    every run gave the same margin: a claim its seeds and kernels do not move at all."""
    worst: float
    spread: float | None
    in_spread: float | None
    n: int


def margin_in_spread(margins: list[float]) -> Margin | None:
    if not margins:
        return None
    worst = min(margins)
    if len(margins) < 2:
        return Margin(worst, None, None, len(margins))
    spread = statistics.stdev(margins)
    if spread == 0:
        return Margin(worst, 0.0, math.copysign(math.inf, worst) if worst else 0.0, len(margins))
    return Margin(worst, spread, worst / spread, len(margins))


@dataclass
class ClaimRow:
    notebook: str
    cell: int | None
    order: int
    text: str          # as the first run printed it
    kind: str
    notebook_runs: int
    runs: list[str] = field(default_factory=list)    # labels of the runs it ran in
    failed: list[str] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)
    wrong_sign: list[str] = field(default_factory=list)  # runs whose margin's sign contradicts holds
    seeds_fixed: bool = False  # the notebook's seeds did not move with the offset: its spread is the kernels' only

    @property
    def passed(self) -> int:
        return len(self.runs) - len(self.failed)

    @property
    def margin(self) -> Margin | None:
        return margin_in_spread(self.margins)


def aggregate(results: list[dict]) -> list[ClaimRow]:
    """One row per claim over the given run results, in notebook and statement order."""
    per_notebook = Counter(r["notebook"] for r in results)
    fixed = seeds_fixed(results)
    rows: dict[tuple, ClaimRow] = {}
    for result in results:
        for record in result["claims"]:
            key = claim_key(result["notebook"], record)
            row = rows.get(key)
            if row is None:
                row = rows[key] = ClaimRow(result["notebook"], record.get("cell"), record["order"], record["claim"],
                                           record["kind"], per_notebook[result["notebook"]],
                                           seeds_fixed=result["notebook"] in fixed)
            row.runs.append(result["label"])
            if not record["holds"]:
                row.failed.append(result["label"])
            margin = record.get("margin")
            if margin is not None:
                row.margins.append(margin)
                if margin != 0 and (margin > 0) != bool(record["holds"]):
                    row.wrong_sign.append(result["label"])
    return sorted(rows.values(), key=lambda r: (r.notebook, _cell_order(r.cell), r.order))


def _cell_order(cell: int | None) -> int:
    return -1 if cell is None else cell


def notes(results: list[dict], rows: list[ClaimRow]) -> list[str]:
    """What the table does not say: per notebook, runs that disagree on the number or text of their claims, runs
    stopped by an error, offsets or kernels that changed no printed value; margins whose sign contradicts the
    claim's verdict."""
    lines = []
    by_notebook = defaultdict(list)
    for result in results:
        by_notebook[result["notebook"]].append(result)
    for notebook, runs in sorted(by_notebook.items()):
        counts = Counter(len(r["claims"]) for r in runs)
        if len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            others = "; ".join(f"{n} in {_labels([r['label'] for r in runs if len(r['claims']) == n])}"
                               for n in sorted(counts) if n != usual)
            lines.append(f"{_short(notebook)}: runs disagree on the number of claims: {usual} in "
                         f"{counts[usual]} runs; {others}")
        texts = defaultdict(set)
        for row in rows:
            if row.notebook == notebook:
                texts[row.cell, row.order].add(row.text)
        for (cell, order), found in sorted(texts.items(), key=lambda item: (_cell_order(item[0][0]), item[0][1])):
            if len(found) > 1:
                lines.append(f"{_short(notebook)} [{cell}]: the runs' claim #{order + 1} of this cell differs in more "
                             f"than its numbers ({len(found)} texts), so it has a row per text")
        for r in runs:
            if r["error"] is not None:
                lines.append(f"{_short(notebook)} {r['label']}: stopped by {r['error']['type']}: "
                             f"{_one_line(r['error']['message'])} (its claims after that did not run)")
        unmoved = [what for what, group in (("the seed offsets", "variant"), ("the CPU kernels", "offset"))
                   if _nothing_moved(runs, group)]
        if unmoved:
            lines.append(f"{_short(notebook)}: {' and '.join(unmoved)} changed no printed value"
                         + (" (its seeds do not follow QALIB_SEED_OFFSET: the spread is not over seeds)"
                            if "the seed offsets" in unmoved else ""))
    for row in rows:
        if row.wrong_sign:
            lines.append(f"{_short(row.notebook)} [{row.cell}] {_cut(row.text, 40)}: the margin's sign contradicts the "
                         f"verdict in {_labels(row.wrong_sign)} (a margin is > 0 when the claim holds)")
    return lines


def seeds_fixed(results: list[dict]) -> set[str]:
    """The notebooks whose runs at different offsets printed the same values: they do not take their seeds from
    qalib.seeds, so a spread over their runs is only the CPU kernels' rounding, not the seeds' variation."""
    by_notebook = defaultdict(list)
    for result in results:
        by_notebook[result["notebook"]].append(result)
    return {nb for nb, runs in by_notebook.items() if _nothing_moved(runs, "variant")}


def _nothing_moved(runs: list[dict], held_fixed: str) -> bool:
    """True if, among runs that share `held_fixed` (a variant, or an offset), every group of two or more printed
    the same claims with the same values (and there is at least one such group)."""
    groups = defaultdict(list)
    for r in runs:
        groups[r[held_fixed]].append(tuple((c["claim"], c["printed"]) for c in r["claims"]))
    compared = [g for g in groups.values() if len(g) > 1]
    return bool(compared) and all(len(set(g)) == 1 for g in compared)


def markdown(results: list[dict], title: str = "Robustness sweep") -> str:
    """The summary: a header, one row per notebook, one row per claim, and the notes."""
    rows = aggregate(results)
    status = Counter(r["status"] for r in results)
    offsets = sorted({r["offset"] for r in results})
    variants = sorted({r["variant"] for r in results})
    scales = sorted({r["scale"] for r in results})
    notebooks = sorted({r["notebook"] for r in results})
    head = (f"**{title}** (scale {', '.join(map(str, scales))}): {len(results)} runs of {len(notebooks)} notebook"
            f"{'s' if len(notebooks) != 1 else ''} = {len(offsets)} seed offsets ({_list(offsets)}) x "
            f"{len(variants)} CPU variants ({', '.join(variants)}); {status['ok']} ok, {status['failed']} with a "
            f"failed claim, {status['error']} stopped by an error.\n"
            "Worst margin: the smallest margin (how far the measurement was from failing, > 0 = held) over the runs, "
            "in standard deviations of the margin over the runs, then in the claim's own units; — : no margin given.\n")
    table = ["| notebook [cell] | claim | pass | worst margin | failed in |", "|---|---|---|---|---|"]
    for row in rows:
        mark = "≡ " if row.kind == "identity" else ""
        ran = f"{row.passed}/{len(row.runs)}" + (f" of {row.notebook_runs}" if len(row.runs) < row.notebook_runs else "")
        table.append(f"| {_short(row.notebook)} [{'' if row.cell is None else row.cell}] | "
                     f"{_escape(mark + _cut(row.text, TEXT_WIDTH))} | {ran} | {format_margin(row.margin, row.seeds_fixed)} | "
                     f"{_labels(row.failed) if row.failed else ''} |")
    found = notes(results, rows)
    tail = ["", "Notes:"] + [f"- {line}" for line in found] if found else []
    return "\n".join([head] + overview(results, rows) + ["", "Per claim:", ""] + table + tail) + "\n"


def overview(results: list[dict], rows: list[ClaimRow]) -> list[str]:
    """One line per notebook, short enough for MAINTAINING.md: its runs, its measurements (✓) and identities (≡), how
    many of them failed in some run, and its tightest margin in spreads (a notebook whose seeds did not move has no
    spread over seeds to measure it in)."""
    lines = ["| notebook | runs: ok / failed / error | ✓ + ≡ | failed in some run | tightest margin |",
             "|---|---|---|---|---|"]
    fixed = seeds_fixed(results)
    for notebook in sorted({r["notebook"] for r in results}):
        status = Counter(r["status"] for r in results if r["notebook"] == notebook)
        mine = [row for row in rows if row.notebook == notebook]
        measured = sum(row.kind == "measurement" for row in mine)
        spread = [row.margin for row in mine if row.margin is not None and row.margin.in_spread is not None
                  and row.margin.spread]
        tightest = ("seeds fixed" if notebook in fixed else
                    format_margin(min(spread, key=lambda m: m.in_spread)) if spread else "—")
        lines.append(f"| {notebook} | {status['ok']} / {status['failed']} / {status['error']} | "
                     f"{measured} + {len(mine) - measured} | {sum(bool(row.failed) for row in mine)} | {tightest} |")
    return lines


def format_margin(m: Margin | None, seeds_fixed: bool = False) -> str:
    if m is None:
        return "—"
    if seeds_fixed:  # a spread of rounding alone would make any margin look like thousands of spreads
        return f"{m.worst:+.3g} (seeds fixed)"
    if m.in_spread is None:
        return f"{m.worst:+.3g} (1 run)"
    if m.spread == 0:
        return f"{m.worst:+.3g} (no spread)"
    return f"{m.in_spread:+.1f}σ ({m.worst:+.3g})"


def _short(notebook: str) -> str:
    return notebook.split("_", 1)[0]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _one_line(text: str) -> str:
    return _cut(" ".join(str(text).split()), 120)


def _labels(labels: list[str]) -> str:
    shown = ", ".join(labels[:SHOWN_RUNS])
    return shown + (f" +{len(labels) - SHOWN_RUNS} more" if len(labels) > SHOWN_RUNS else "")


def _list(values: list[int]) -> str:
    return ", ".join(map(str, values)) if len(values) <= 4 else f"{values[0]}, {values[1]}, ..., {values[-1]}"
