import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from qalib.topics.nb15_tokenization import compute as tk  # noqa: E402
from qalib.topics.nb15_tokenization import experiment as te  # noqa: E402
from qalib.topics.nb15_tokenization import demos as demos  # noqa: E402

LINES = ["The quick brown fox jumps over the lazy dog.", "Tokenizers split rare words into pieces.",
         "A lazy dog sleeps; the fox jumps again."] * 20


@pytest.fixture(scope="module")
def small():
    """Every kind trained on a few lines: enough for what holds whatever the corpus."""
    return {kind: te.train_tokenizer(kind, 300, LINES) for kind in te.KINDS}


# -- the corpus and the words -----------------------------------------------------------------------------
def test_corpus_splits_by_document_and_is_deterministic():
    a, b = tk.stdlib_corpus(), tk.stdlib_corpus()
    assert a == b
    train_names, held_names = {n for n, _ in a.train}, {n for n, _ in a.held_out}
    assert not train_names & held_names
    assert len(a.held_out) * (tk.HELD_OUT_EVERY - 1) <= len(a.train) + tk.HELD_OUT_EVERY
    assert a.size("train")["words"] > 3 * a.size("held_out")["words"] > 0
    assert all(text.strip() for _, text in a.train + a.held_out)


def test_bert_words_lowercase_strip_accents_and_split_punctuation():
    assert tk.bert_words("Dvořák's café, 1893!") == ["dvorak", "'", "s", "cafe", ",", "1893", "!"]
    assert tk.bert_words("") == [] and tk.bert_words("  \n ") == []


def test_encode_lines_gives_one_entry_per_word_for_every_kind(small):
    lines = tk.line_words("The fox sleeps.\n\nA zebra? 東京 🤗")
    n_words = sum(len(line) for line in lines)
    for kind, tok in small.items():
        pieces = tk.encode_lines(tok, lines)
        assert len(pieces) == n_words and all(pieces), kind


def test_word_level_marks_unseen_words_unk_and_subwords_spell_them(small):
    words = [["sox", "fox"]]  # "sox" is no training word, but s starts words there and o, x continue them
    assert tk.encode_lines(small["word"], words)[0] == [tk.UNK]
    wordpiece = tk.encode_lines(small["wordpiece"], words)[0]
    assert tk.UNK not in wordpiece and "".join(p.removeprefix("##") for p in wordpiece) == "sox"
    # a character the training text never had: WordPiece drops the whole word, byte-level BPE cannot
    assert tk.encode_lines(small["wordpiece"], [["fox∑"]])[0] == [tk.UNK]
    assert tk.UNK not in tk.encode_lines(small["byte-level bpe"], [["fox∑"]])[0]


def test_unigram_unknown_character_counts_as_unk_by_id(small):
    """The unigram model keeps an unknown character's own text as the token and puts [UNK] only in the id: counted
    by text, its [UNK] rate would be 0 whatever it met. Counted by id, it hits [UNK] where WordPiece and BPE do."""
    unigram = small["unigram"]
    enc = unigram.encode(["fox∑"], is_pretokenized=True, add_special_tokens=False)
    assert tk.UNK not in enc.tokens and "∑" in enc.tokens          # the text is the raw character ...
    assert unigram.token_to_id(tk.UNK) in enc.ids                    # ... the id is [UNK]
    pieces, unknown = tk.encode_marked(unigram, [["fox∑", "fox"]])
    assert unknown[0][pieces[0].index("∑")] and not any(unknown[1])
    folds = [[["fox∑", "fox"]], [["dog", "sox"]]]
    for kind in ("wordpiece", "bpe", "unigram"):
        assert tk.held_out_stats(small[kind], folds)["unk_rate"].tolist() == [0.5, 0.0], kind
        assert tk.unk_words(small[kind], folds) == ["fox∑"], kind
    assert tk.held_out_stats(small["byte-level bpe"], folds)["unk_rate"].tolist() == [0.0, 0.0]
    row = tk.pieces_view("fox∑", {"unigram": unigram})["rows"]["unigram"]
    assert row["unk"] == 1 and row["unknown"][row["pieces"].index("∑")]  # demo 1 draws its box as [UNK]


def test_word_stats_and_folds():
    stats = tk.word_stats([["a"], ["b", "##c"], ["°"]], [[False], [False, False], [True]])
    assert stats["tokens_per_word"] == pytest.approx(4 / 3) and stats["unk_rate"] == pytest.approx(1 / 3)
    assert np.isnan(tk.word_stats([], [])["tokens_per_word"])
    with pytest.raises(ValueError, match="unknown"):
        tk.word_stats([["a"]], [])
    docs = [(f"d{i}", f"word{i} and more") for i in range(6)]
    folds = tk.held_out_folds(docs, n_folds=3)
    assert [len(f) for f in folds] == [2, 2, 2] and folds[0][0] == ["word0", "and", "more"]
    with pytest.raises(ValueError, match="n_folds"):
        tk.held_out_folds(docs, n_folds=7)


def test_unseen_characters_counts_words_outside_the_training_alphabet():
    res = tk.unseen_characters(["abc def"], ["abz", "cab"])
    assert res["words"] == 2 and res["with_unseen_char"] == 1


def test_reached_points_draw_a_size_not_reached_once():
    sizes, rows = tk.reached_points([500, 2000, 2979, 2979], np.arange(8).reshape(2, 4))
    assert sizes.tolist() == [500, 2000, 2979] and rows.tolist() == [[0, 1, 2], [4, 5, 6]]


def test_plot_tradeoff_draws_against_the_sizes_reached():
    reached = {"word": np.array([500, 900, 900]), "wordpiece": np.array([500, 1000, 1100])}
    rows = {k: np.ones((3, 2)) for k in reached}
    fig = plt.figure()
    tk.plot_tradeoff(fig, reached, rows, rows)
    ax1, ax2, ax3 = fig.axes
    assert ax1.lines[0].get_xdata().tolist() == [500, 900] and ax2.lines[1].get_xdata().tolist() == [500, 1000, 1100]
    assert "reached" in ax1.get_xlabel() and ax1.lines[0].get_color() != ax1.lines[1].get_color()
    fig.canvas.draw()
    plt.close(fig)


def test_unigram_size_reached_follows_the_em_steps_not_the_size_asked():
    lines = tk.stdlib_corpus().lines("train")[:3000]
    by_steps = te.unigram_sizes_by_em_steps(lines, 20000, em_steps=(1, 4))
    assert by_steps[1] > by_steps[4] and by_steps[1] < 20000
    assert te.unigram_sizes_by_em_steps(lines, 30000, em_steps=(4,)) == {4: by_steps[4]}


def test_split_differences_and_overlap(small):
    same = tk.split_differences(small["wordpiece"], small["wordpiece"], ["fox", "zebra"])
    assert same["share"] == 0 and same["words"] == 2
    assert tk.vocab_overlap(small["bpe"], small["bpe"])["share"] == 1
    with pytest.raises(ValueError, match="words"):
        tk.split_differences(small["bpe"], small["bpe"], [])


# -- parameters, attention, verdicts -----------------------------------------------------------------------
def test_bert_base_parameters_match_the_published_count():
    bert = tk.bert_base_params()
    assert bert["total"] == 109_482_240 and bert["embeddings"] == 23_837_184
    assert bert["word_share"] == pytest.approx(0.2141, abs=1e-4)
    with pytest.raises(ValueError, match="vocab_size"):
        tk.bert_base_params(vocab_size=0)


def test_embedding_share_and_attention_cost():
    share = tk.embedding_share([500, 30522, 10**6])
    assert np.all(np.diff(share) > 0) and share[1] == pytest.approx(tk.bert_base_params()["word_share"])
    assert tk.attention_cost([2.0, 1.0]).tolist() == [4.0, 1.0]


def test_verdicts_follow_the_numbers():
    lines = tk.verdicts([500, 1000, 2000, 4000], [500, 1000, 1500, 1500], [2.0, 1.5, 1.48, 1.48], [0.2, 0, 0, 0])
    assert "[UNK]" in lines[0] and "sequence-bound" not in lines[0]
    assert "table-bound" in tk.verdicts([500, 1000], [500, 1000], [1.0, 0.99], [0, 0])[0]
    assert "sequence-bound" in tk.verdicts([500, 1000], [500, 1000], [1.5, 1.0], [0, 0])[0]
    assert "ran out at 1500" in lines[2] and "ran out" in lines[3]


# -- training and the demo ---------------------------------------------------------------------------------
def test_train_tokenizer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        te.train_tokenizer("chars", 500, LINES)
    with pytest.raises(ValueError, match="vocab_size"):
        te.train_tokenizer("bpe", 10, LINES)


def test_the_hash_bpe_marks_continuations_like_wordpiece():
    tok = te.bpe_with_continuation_prefix(300, LINES)
    assert any(t.startswith("##") for t in tok.get_vocab())


def test_pieces_view_handles_empty_huge_odd_and_html_input(small):
    empty = tk.pieces_view("", small)
    assert empty["words"] == 0 and "Type a sentence" in empty["note"]
    huge = tk.pieces_view("word " * 1000, small)
    assert len(huge["text"]) == tk.MAX_DEMO_CHARS and "first" in huge["note"]
    odd = tk.pieces_view("\u200b\u0301 <b>&</b> 🤗 $x$", small)
    assert "<b>" not in odd["note"] and "&lt;b&gt;" in odd["note"]
    assert odd["rows"]["byte-level bpe"]["unk"] == 0
    with pytest.raises(ValueError, match="text"):
        tk.pieces_view(None, small)
    fig = plt.figure()
    tk.plot_pieces(fig, odd)  # mathtext off: "$x$" is drawn as typed
    fig.canvas.draw()
    plt.close(fig)


def test_demo_types_and_changes_size():
    demo = demos.tokenizer_demo()
    assert demo.error is None and demo.result["words"] > 0
    demo.set(text="", size=demo.controls["size"].options[-1])
    assert demo.error is None and "Type a sentence" in demo.message.value
    demo.set(text="<script>alert(1)</script>")
    assert "<script>" not in demo.message.value


def test_table_tradeoff_matches_bert_base_and_notes_extrapolation():
    r = tk.table_tradeoff(30522, 768, True, [500, 2000, 8000], [1.6, 1.2, 1.05])
    assert r["share"] == pytest.approx(tk.bert_base_params()["word_share"]) and r["tpw_at_v"] == pytest.approx(1.05)
    assert "outside" in r["note"]
    untied = tk.table_tradeoff(2000, 768, False, [500, 2000, 8000], [1.6, 1.2, 1.05])
    assert untied["tables"] == 2 * 2000 * 768 and untied["note"] == "" and untied["tpw_at_v"] == pytest.approx(1.2)
    with pytest.raises(ValueError, match="d must"):
        tk.table_tradeoff(2000, 0, True, [500, 2000], [1.6, 1.2])
    fig = plt.figure()
    tk.plot_table_tradeoff(fig, untied)
    fig.canvas.draw()
    plt.close(fig)


def test_wordpiece_training_is_the_same_in_every_process():
    """The library's BPE trainer (behind WordPieceTrainer) numbers its "##" tokens in hash-map order, which changes
    from process to process and breaks merge ties differently (huggingface/tokenizers #1794); continuation_alphabet
    fixes those numbers. Three fresh processes must train the same WordPiece and "##" BPE vocabularies."""
    import subprocess
    import sys

    script = ("import json; from qalib.topics.nb15_tokenization import experiment as te; from qalib.topics.nb15_tokenization.compute "
              "import stdlib_corpus; lines = stdlib_corpus().lines('train')[:3000]; "
              "print(json.dumps([sorted(te.train_tokenizer('wordpiece', 1500, lines).get_vocab().items()), "
              "sorted(te.bpe_with_continuation_prefix(1500, lines).get_vocab().items())]))")
    runs = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
            for _ in range(3)}
    assert len(runs) == 1, "WordPiece training differs between processes"
    wordpiece, bpe = __import__("json").loads(runs.pop())
    assert {t for t, _ in wordpiece} == {t for t, _ in bpe}  # the same entries: WordPieceTrainer runs BPE
