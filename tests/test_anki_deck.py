"""`make anki`'s deck: one note per drill question, stable note ids, and a real Anki collection that imports it
and, given an updated deck, updates the notes instead of adding copies."""

import dataclasses
import zipfile

import genanki
import pytest

from qalib.practice.interview import pool
from qalib.tools import anki_deck
from qalib.tools.anki_deck import DECK_ID, DECK_NAME, MODEL_ID, build_deck, main, note_guid, note_tags, write_deck

T0 = 1_780_000_000.0  # the first build's time; the updated deck is built a minute later


@pytest.fixture(scope="module")
def cards():
    return pool()


def test_one_note_per_follow_up_and_quiz_question_with_ids_from_the_question(cards):
    deck = build_deck(cards)
    assert len(deck.notes) == len(cards) and (deck.deck_id, deck.name) == (DECK_ID, DECK_NAME)
    assert {n.model.model_id for n in deck.notes} == {MODEL_ID}
    guids = [n.guid for n in deck.notes]
    assert len(set(guids)) == len(guids)
    assert guids == [genanki.guid_for(c.notebook, c.id) for c in cards]
    edited = dataclasses.replace(cards[0], answer="A new answer.")
    assert note_guid(edited) == note_guid(cards[0])  # an edited answer keeps its note


def test_tags_name_the_notebook_and_section_without_spaces(cards):
    for c in cards:
        tags = note_tags(c)
        assert tags[0] == f"qalib::{c.notebook}" and tags[1].startswith(tags[0] + "::")
        assert not any(" " in t for t in tags), tags


def test_every_formula_is_closed_and_a_quiz_note_shows_its_options(cards):
    deck = build_deck(cards)
    for n in deck.notes:
        for field in n.fields:
            assert field.count("\\(") == field.count("\\)") and field.count("\\[") == field.count("\\]"), field
    assert sum("\\(" in f for n in deck.notes for f in n.fields) > 100  # the drills are full of formulas
    quiz = next(n for n, c in zip(deck.notes, cards) if c.question is not None)
    assert quiz.fields[1].startswith("<li>") and quiz.fields[2].startswith("<p><strong>")


def test_the_command_writes_anki_qalib_apkg(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "anki")]) == 0
    path = tmp_path / "anki" / anki_deck.FILE_NAME
    assert zipfile.ZipFile(path).namelist() == ["collection.anki2", "media"]
    assert f"({len(pool())} notes)" in capsys.readouterr().out


def test_a_real_anki_collection_imports_the_deck_and_updates_it_in_place(tmp_path, cards):
    from anki.collection import Collection
    from anki.consts import CARD_TYPE_REV
    from anki.import_export_pb2 import ImportAnkiPackageOptions, ImportAnkiPackageRequest

    first = write_deck(tmp_path / "v1", cards, timestamp=T0)
    target = next(c for c in cards if c.question is None and "$" in c.answer)
    changed = [dataclasses.replace(c, answer="Edited: the variance is $d_k$.", short="It is $d_k$.") if c == target
               else c for c in cards]
    second = write_deck(tmp_path / "v2", changed, timestamp=T0 + 60)

    (tmp_path / "collection").mkdir()  # a fresh, empty collection
    col = Collection(str(tmp_path / "collection" / "collection.anki2"))
    try:
        def import_(path):
            return col.import_anki_package(ImportAnkiPackageRequest(
                package_path=str(path), options=ImportAnkiPackageOptions()))  # Anki's defaults: update if newer

        log = import_(first).log
        assert len(log.new) == len(cards) and col.note_count() == len(cards)
        guid = note_guid(target)
        nid = col.db.scalar("select id from notes where guid = ?", guid)
        note = col.get_note(nid)
        assert note["Question"] == anki_deck.to_anki_html(target.prompt)
        assert "\\(" in note["Answer"] and "$" not in note["Answer"]  # a formula, in Anki's MathJax delimiters
        assert f"qalib::{target.notebook}" in note.tags and note_tags(target)[1] in note.tags
        assert col.decks.by_name(DECK_NAME) is not None
        cid = note.card_ids()[0]
        col.sched.set_due_date([cid], "5")  # the student has scheduled this card: a review due in 5 days
        scheduled = col.db.first("select type, due, ivl from cards where id = ?", cid)
        assert scheduled[0] == CARD_TYPE_REV

        log = import_(second).log
        assert len(log.new) == 0 and col.note_count() == len(cards)          # updated, not duplicated
        assert col.db.scalar("select id from notes where guid = ?", guid) == nid
        assert col.get_note(nid)["Answer"] == ("<p><strong>It is \\(d_k\\).</strong></p><hr>"  # the short answer first
                                               "Edited: the variance is \\(d_k\\).")
        assert col.get_note(nid).card_ids() == [cid]
        assert col.db.first("select type, due, ivl from cards where id = ?", cid) == scheduled  # kept
    finally:
        col.close()


def test_core_questions_carry_the_core_tag():
    from qalib.practice.interview import pool

    cards = pool()
    core = [c for c in cards if "qalib::core" in note_tags(c)]
    assert core and all(c.core for c in core) and len(core) == sum(c.core for c in cards)
