"""`make anki`: every drill follow-up and quiz question as one Anki deck, anki/qalib.apkg (genanki, offline).

    python -m qalib.tools.anki_deck --out anki

One note per question of the mock interview's pool (qalib.practice.interview.pool: the follow-ups and the quiz
questions of every drill file), tagged `qalib::<notebook>` and `qalib::<notebook>::<section>`. Formulas are
converted for Anki's MathJax and the rest of the text is HTML-escaped (qalib.tools.anki_html).

Re-importing an updated deck updates its notes instead of adding copies: a note's GUID is derived from the
question's own stable id (notebook and prompt, the id the mock interview keys its progress on), and the note type
and deck ids are fixed constants. Anki's import updates a note when the file's copy is newer, so the notes carry
the build time as their modification time (pass `timestamp` for a reproducible file).
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

import genanki

from qalib.notebook.paths import ROOT
from qalib.practice.interview import Card, pool
from qalib.tools.anki_html import tag, to_anki_html

# Fixed for good: Anki matches a re-imported note type and deck by these ids. Drawn once at random in the range
# genanki suggests (1 << 30 .. 1 << 31); changing one makes Anki treat the next import as a new type or deck.
MODEL_ID = 2_086_074_686
DECK_ID = 1_643_795_580
DECK_NAME = "qalib: Transformer interview drills"
FILE_NAME = "qalib.apkg"
FIELDS = ("Question", "Options", "Answer", "Source")

MODEL = genanki.Model(
    MODEL_ID, "qalib drill question",
    fields=[{"name": f} for f in FIELDS],
    templates=[{
        "name": "Question and answer",
        "qfmt": '<div class="question">{{Question}}</div>{{#Options}}<ol class="options">{{Options}}</ol>{{/Options}}',
        "afmt": '{{FrontSide}}<hr id="answer"><div class="answer">{{Answer}}</div>'
                '<div class="source">{{Source}}</div>',
    }],
    css=(".card { font-family: sans-serif; font-size: 18px; text-align: left; max-width: 46em; margin: auto; }\n"
         ".question { font-weight: bold; }\n"
         ".source { margin-top: 1.2em; font-size: 14px; color: #666; }\n"
         "code { font-size: 90%; background: #f0f0f0; padding: 0 .2em; }\n"),
)


def note_guid(card: Card) -> str:
    """The note's GUID: from the question's stable id, so an edited answer updates the same note."""
    return genanki.guid_for(card.notebook, card.id)


def note_tags(card: Card) -> list[str]:
    """The notebook's tag and the section's, nested under it (tags have no spaces); a core question also carries
    `qalib::core` (in Anki, a filtered deck on that tag is the night-before set)."""
    tags = [f"qalib::{card.notebook}", f"qalib::{card.notebook}::{tag(card.section)}"]
    return tags + (["qalib::core"] if card.core else [])


def note_fields(card: Card) -> list[str]:
    """Question, options (a quiz question's, as <li>; empty for a follow-up), answer, source."""
    q = card.question
    options = "" if q is None else "".join(f"<li>{to_anki_html(o)}</li>" for o in q.options)
    answer = to_anki_html(card.answer)
    if card.short:  # the short answer first, the full one under a rule
        answer = f"<p><strong>{to_anki_html(card.short)}</strong></p><hr>{answer}"
    if q is not None:
        answer = f"<p><strong>{to_anki_html(q.options[q.answer])}</strong></p>{answer}"
    source = f"{html.escape(card.notebook)} · {to_anki_html(card.section)}"
    return [to_anki_html(card.prompt), options, answer, source]


def note(card: Card) -> genanki.Note:
    return genanki.Note(model=MODEL, fields=note_fields(card), tags=note_tags(card), guid=note_guid(card))


def build_deck(cards: list[Card] | None = None) -> genanki.Deck:
    """The deck of the given cards (default: every drill's follow-ups and quiz questions)."""
    deck = genanki.Deck(DECK_ID, DECK_NAME, description="Follow-ups and self-check questions of qalib's notebooks.")
    for card in pool() if cards is None else cards:
        deck.add_note(note(card))
    return deck


def write_deck(out: Path, cards: list[Card] | None = None, timestamp: float | None = None) -> Path:
    """Write out/qalib.apkg and return its path. `timestamp`: the notes' modification time (default: now)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / FILE_NAME
    genanki.Package(build_deck(cards)).write_to_file(str(path), timestamp=timestamp)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write every drill question as an Anki deck (.apkg).")
    parser.add_argument("--out", type=Path, default=ROOT / "anki", help="folder for qalib.apkg (default: anki/)")
    args = parser.parse_args(argv)
    cards = pool()
    path = write_deck(args.out, cards)
    print(f"wrote {path} ({len(cards)} notes); in Anki: File > Import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
