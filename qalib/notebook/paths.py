"""Where the project's files are. Kept free of heavy imports: the catalog uses it inside every kernel
(nbformat, which the notebook tools need, takes ~3 s to import because of its JSON-schema validators)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
