"""Run every notebook 01-11 with QALIB_MODEL set to another BERT, and count per notebook the claims that ran and
the claims skipped as model-specific (holds_for=...). Not part of the test suite: it takes minutes.

    python -m qalib.tools.any_bert                  # saves a random BERT (3 layers, d = 192, 12 heads) first
    python -m qalib.tools.any_bert --folder F       # any checkpoint folder qalib.nn.pretrained.load reads
    python -m qalib.tools.any_bert --only 04 09     # some notebooks only
    make any-bert MODEL=F

A notebook whose claim fails on the other model raises, and is reported as failed with the error's last line.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from qalib.nn.pretrained import ENV_VAR, model_dir
from qalib.notebook.claims import SKIP, TICK
from qalib.tools.nbtools import notebook_paths, statement_lines

NOTEBOOKS = [f"{n:02d}_" for n in range(1, 12)]  # the notebooks with an "In a real model" section


def save_random_bert(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised BertModel with a pooler, 3 layers, d = 192, 12 heads, and MiniLM's vocab.txt (so its
    tokenizer works on real text), written as save_pretrained does: another size and no training at all."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=192, num_hidden_layers=3, num_attention_heads=12,
                                     intermediate_size=768, max_position_embeddings=512, type_vocab_size=2)
    transformers.BertModel(config, add_pooling_layer=True).save_pretrained(folder, safe_serialization=True)
    (folder / "vocab.txt").write_bytes((model_dir() / "vocab.txt").read_bytes())
    return folder


def count(lines: list[str]) -> tuple[int, int]:
    """(measurements that ran, claims skipped as model-specific) among a notebook's statement lines."""
    return sum(line.startswith(TICK) for line in lines), sum(line.startswith(SKIP) for line in lines)


def run_all(folder: Path, timeout: int, only: list[str] | None = None) -> int:
    from nbclient.exceptions import CellExecutionError

    from qalib.tools.nbtools import execute

    os.environ[ENV_VAR] = str(folder)  # the kernels inherit it
    failed = 0
    print(f"{ENV_VAR}={folder}")
    chosen = tuple(f"{n}_" for n in only) if only else tuple(NOTEBOOKS)
    for path in notebook_paths():
        if not path.name.startswith(chosen):
            continue
        try:
            nb, secs = execute(path, timeout=timeout)
        except CellExecutionError as err:
            failed += 1
            last = [line for line in str(err).splitlines() if line.strip()][-1]
            print(f"{path.name}: FAILED: {last}", flush=True)
            continue
        ran, skipped = count(statement_lines(nb) + _skip_lines(nb))
        print(f"{path.name}: {secs:.1f} s, {ran} measurements ran, {skipped} claims skipped as model-specific",
              flush=True)
    return 1 if failed else 0


def _skip_lines(nb) -> list[str]:
    """The ⊘ lines (statement_lines keeps only ✓, ≡ and ❝)."""
    return [line for cell in nb.cells for out in cell.get("outputs", []) if out.get("output_type") == "stream"
            for line in out.get("text", "").splitlines() if line.startswith(SKIP)]


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m qalib.tools.any_bert", description="Run notebooks 01-11 with QALIB_MODEL set to another BERT; "
                                     "count per notebook the claims that ran and those skipped as model-specific.")
    parser.add_argument("--folder", type=Path, help="a BERT checkpoint folder (default: save a random BERT)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (default 300)")
    parser.add_argument("--only", nargs="+", choices=[n[:2] for n in NOTEBOOKS], metavar="NN",
                        help="run these notebooks only, e.g. --only 04 09 (default: 01-11)")
    args = parser.parse_args(argv)
    if args.folder is not None:
        return run_all(args.folder.expanduser().resolve(), args.timeout, args.only)
    with tempfile.TemporaryDirectory() as tmp:
        return run_all(save_random_bert(Path(tmp) / "random-bert"), args.timeout, args.only)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
