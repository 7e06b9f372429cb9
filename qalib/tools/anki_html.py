"""A drill's markdown as the HTML an Anki field holds, with formulas for Anki's MathJax.

Anki typesets only \\( ... \\) (inline) and \\[ ... \\] (display); the drills write $...$ and $$...$$. The rules for
what is a formula are pandoc's, so a price is not mistaken for one:
- an inline formula opens with a $ that has no space after it, and closes with a $ that has no space before it and
  no digit after it ("$20 and $30" stays text), on the same paragraph;
- \\$ is a literal dollar sign;
- nothing inside `code` is a formula (nor emphasis): code is shown as it is written.
Everything else is HTML-escaped, formulas included (MathJax reads the decoded text, so `a < b` still typesets), except
the few inline tags the drills write themselves for emphasis (ALLOWED_TAGS, without attributes), which markdown would
pass through too. *x* and **x** become <em> and <strong>; a blank line starts a new paragraph, a single line break is a
space (the drill files wrap their lines).
"""

from __future__ import annotations

import html
import re

ALLOWED_TAGS = ("em", "strong", "b", "i", "sub", "sup")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_ALLOWED = re.compile(r"&lt;(/?)(" + "|".join(ALLOWED_TAGS) + r")&gt;")
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.S)
_EM = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])", re.S)
_SLOT = re.compile("\x00(\\d+)\x00")  # a placeholder for a formula or code span, kept apart while the text is escaped


def _inline_close(text: str, start: int) -> int | None:
    """Where the inline formula opened by the $ at `start` closes, or None if that $ opens none."""
    if start + 1 >= len(text) or text[start + 1].isspace():
        return None
    j = start + 1
    while (j := text.find("$", j)) != -1:
        if _BLANK_LINE.search(text, start, j):
            return None
        if text[j - 1].isspace() or text[j - 1] == "\\" or (j + 1 < len(text) and text[j + 1].isdigit()):
            j += 1
            continue
        return j
    return None


def to_anki_html(markdown: str) -> str:
    """The drill text as one Anki field's HTML (see the module docstring for the rules)."""
    slots: list[str] = []

    def slot(fragment: str) -> str:
        slots.append(fragment)
        return f"\x00{len(slots) - 1}\x00"

    text, out, i = markdown.strip().replace("\x00", ""), [], 0
    while i < len(text):
        if text.startswith("\\$", i):
            out.append(slot("$"))
            i += 2
        elif text[i] == "`":
            fence = text[i:i + len(text[i:]) - len(text[i:].lstrip("`"))]  # a code span closes on the same run
            close = re.compile(rf"(?<!`){fence}(?!`)").search(text, i + len(fence))
            if close:
                code = text[i + len(fence):close.start()]
                out.append(slot(f"<code>{html.escape(code, quote=False)}</code>"))
                i = close.end()
            else:
                out.append(fence)
                i += len(fence)
        elif text.startswith("$$", i):
            close = text.find("$$", i + 2)
            if close != -1 and text[i + 2:close].strip():
                out.append(slot(f"\\[{html.escape(text[i + 2:close].strip(), quote=False)}\\]"))
                i = close + 2
            else:
                out.append("$$")
                i += 2
        elif text[i] == "$" and (close := _inline_close(text, i)) is not None:
            out.append(slot(f"\\({html.escape(text[i + 1:close], quote=False)}\\)"))
            i = close + 1
        else:
            out.append(text[i])
            i += 1
    paragraphs = _BLANK_LINE.split(_ALLOWED.sub(r"<\1\2>", html.escape("".join(out), quote=False)))
    paragraphs = [_EM.sub(r"<em>\1</em>", _STRONG.sub(r"<strong>\1</strong>", " ".join(p.split("\n"))))
                  for p in paragraphs]
    return _SLOT.sub(lambda m: slots[int(m.group(1))], "<br><br>".join(paragraphs))


def tag(text: str) -> str:
    """An Anki tag from a heading: lower case, formulas' letters kept, every other run of characters one
    underscore (Anki tags cannot contain spaces, and `::` would nest them)."""
    return re.sub(r"[^a-z0-9.]+", "_", text.lower()).strip("_.") or "untitled"
