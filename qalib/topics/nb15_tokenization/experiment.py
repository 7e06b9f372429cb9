"""Notebook 15, the tokenizers trained live: word-level, WordPiece, BPE, unigram and byte-level BPE at each
vocabulary size, on the stdlib corpus, with their held-out statistics; and the demo that types into them.

    sweep = run_vocab_sweep(corpus, sizes=(500, 2000, 8000, 32000))
    sweep.tokenizers[("wordpiece", 8000)]           # a trained tokenizers.Tokenizer
    sweep.tokens_per_word["bpe"]                    # (sizes, folds) held-out tokens per word
    sweep.unk_rate["word"], sweep.reached["bpe"]    # (sizes, folds) [UNK] share of words; (sizes,) pieces reached
    unigram_sizes_by_em_steps(lines, 32000)         # {EM steps per round: size reached}: why unigram stops short
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from qalib.topics.nb15_tokenization.compute import (UNK, Corpus, bert_normalizer, bert_pre_tokenizer, bert_words, held_out_folds,
                                       held_out_stats, stdlib_corpus)
from qalib.nn.validate import choice, choices, int_in


KINDS = ("word", "wordpiece", "bpe", "unigram", "byte-level bpe")


def train_tokenizer(kind: str, vocab_size: int, lines: list[str], em_steps: int = 2) -> Tokenizer:
    """A `kind` tokenizer with at most vocab_size entries, trained on `lines` by the tokenizers library.

    word:           whole words, the vocab_size - 1 most frequent, every other word [UNK]
    wordpiece:      the library's WordPieceTrainer; encodes greedy longest-match-first, "##" on non-initial pieces,
                    the whole word [UNK] if some part matches nothing (BERT's tokenization.py rule)
    bpe:            BpeTrainer; encodes by applying the learned merges in order (Sennrich et al. 2016)
    unigram:        UnigramTrainer (Kudo 2018): prunes a large seed vocabulary by likelihood, encodes by Viterbi;
                    em_steps EM steps per pruning round (the library's n_sub_iterations, 2 by default). An unknown
                    character keeps its own text as the token but gets the [UNK] id
    byte-level bpe: BPE over the 256 bytes (GPT-2, Radford et al. 2019 sec. 2.2): raw text, no [UNK] possible
    All but byte-level BPE share BERT-uncased's normaliser and word splitter, so only the model differs."""
    choice("kind", kind, KINDS)
    int_in("vocab_size", vocab_size, 300)  # byte-level BPE starts from 256 symbols
    int_in("em_steps", em_steps, 1, 100)
    if kind == "byte-level bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
    else:
        model, trainer = {
            "word": lambda: (models.WordLevel(unk_token=UNK),
                             trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=[UNK],
                                                       show_progress=False)),
            "wordpiece": lambda: (models.WordPiece(unk_token=UNK),
                                  trainers.WordPieceTrainer(vocab_size=vocab_size,
                                                            special_tokens=[UNK, *continuation_alphabet(lines)],
                                                            show_progress=False)),
            "bpe": lambda: (models.BPE(unk_token=UNK),
                            trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[UNK], show_progress=False)),
            "unigram": lambda: (models.Unigram(),
                                trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=[UNK], unk_token=UNK,
                                                        n_sub_iterations=em_steps, show_progress=False)),
        }[kind]()
        tok = Tokenizer(model)
        tok.normalizer, tok.pre_tokenizer = bert_normalizer(), bert_pre_tokenizer()
    tok.train_from_iterator(lines, trainer)
    return _only_unk_special(tok) if kind == "wordpiece" else tok


PREFIX = "##"


def continuation_alphabet(lines: list[str]) -> list[str]:
    """"##c" for every character c that occurs inside a word (not first) of `lines`, sorted.

    Why: the library's BPE trainer (which WordPieceTrainer runs) creates these tokens while iterating over a hash
    map of word counts, so their ids, which break ties between equally frequent merges, change from one process to
    the next, and so do a few merges (huggingface/tokenizers issue #1794; fix proposed in PR #2066). Given first, as
    special tokens, they get fixed ids, and training is the same in every kernel."""
    inner = {c for line in lines for word in bert_words(line) for c in word[1:]}
    return [PREFIX + c for c in sorted(inner)]


def _only_unk_special(tok: Tokenizer) -> Tokenizer:
    """The trained tokenizer with [UNK] as its only added token: the "##c" tokens given to fix the training's ids
    stay in the vocabulary, as ordinary entries, but are no longer matched as special strings in raw text."""
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] == UNK]
    return Tokenizer.from_str(json.dumps(spec))


def bpe_with_continuation_prefix(vocab_size: int, lines: list[str]) -> Tokenizer:
    """BPE whose non-initial pieces carry "##" as WordPiece's do, so the two vocabularies can be compared entry
    for entry (the myth check: do the library's WordPiece and BPE trainers pick the same pieces?)."""
    int_in("vocab_size", vocab_size, 300)
    tok = Tokenizer(models.BPE(unk_token=UNK, continuing_subword_prefix=PREFIX))
    tok.normalizer, tok.pre_tokenizer = bert_normalizer(), bert_pre_tokenizer()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab_size,
                                                       special_tokens=[UNK, *continuation_alphabet(lines)],
                                                       continuing_subword_prefix=PREFIX, show_progress=False))
    return _only_unk_special(tok)


def unigram_sizes_by_em_steps(lines: list[str], vocab_size: int = 32000, em_steps=(1, 2, 4)) -> dict[int, int]:
    """The vocabulary size a unigram tokenizer asked for vocab_size reaches, for each number of EM steps per round.

    Why unigram stops short: the library's UnigramTrainer re-estimates the pieces by EM and, in every M step, drops
    each piece whose expected count in the training words is under 0.5 (unigram/trainer.rs, run_m_step). It prunes
    towards the size asked for only after a round of EM steps leaves more than 1.1 times that size; on a small corpus
    the EM steps alone can leave fewer, and then the size reached depends on how many EM steps ran, not on the size
    asked for."""
    return {int(n): train_tokenizer("unigram", vocab_size, lines, em_steps=n).get_vocab_size() for n in em_steps}


@dataclass
class Sweep:
    sizes: tuple[int, ...]
    kinds: tuple[str, ...]
    tokenizers: dict = field(repr=False)   # (kind, size) -> Tokenizer
    reached: dict                           # kind -> (sizes,) the vocabulary size actually trained
    tokens_per_word: dict                   # kind -> (sizes, folds)
    unk_rate: dict                          # kind -> (sizes, folds)
    seconds: float                          # wall-clock time of all the training and encoding (printed only)


def run_vocab_sweep(corpus: Corpus, sizes=(500, 2000, 8000, 32000), kinds=KINDS) -> Sweep:
    """Train every kind at every size on the corpus's training documents; measure each on the held-out folds."""
    sizes = tuple(int_in("size", s, 300) for s in sizes)
    kinds = tuple(choices("kinds", kinds, KINDS))
    start = time.perf_counter()
    lines, folds = corpus.lines("train"), held_out_folds(corpus.held_out)
    toks, reached, tpw, unk = {}, {}, {}, {}
    for kind in kinds:
        stats = []
        for size in sizes:
            tok = toks[(kind, size)] = train_tokenizer(kind, size, lines)
            stats.append(held_out_stats(tok, folds))
        reached[kind] = np.array([toks[(kind, s)].get_vocab_size() for s in sizes])
        tpw[kind] = np.stack([s["tokens_per_word"] for s in stats])
        unk[kind] = np.stack([s["unk_rate"] for s in stats])
    return Sweep(sizes, kinds, toks, reached, tpw, unk, time.perf_counter() - start)


DEMO_TEXT = "Tokenizers split unaffable words like 'Dvořák' into ## pieces."


@lru_cache(maxsize=1)
def small_sweep() -> Sweep:
    return run_vocab_sweep(stdlib_corpus(), sizes=(500, 2000))
