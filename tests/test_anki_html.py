"""A drill's markdown as an Anki field: formulas for Anki's MathJax, code left alone, everything else escaped."""

import pytest

from qalib.tools.anki_html import tag, to_anki_html


@pytest.mark.parametrize("markdown, field", [
    ("Why $q\\cdot k$?", "Why \\(q\\cdot k\\)?"),                                       # inline formula
    ("so $$\\sum_i q_i k_i$$ grows", "so \\[\\sum_i q_i k_i\\] grows"),                 # display formula
    ("$a<b$ & $c$", "\\(a&lt;b\\) &amp; \\(c\\)"),                                     # escaped inside too
    ("costs $20 and $30", "costs $20 and $30"),                                         # prices are not formulas
    ("a \\$5 fee, $x$", "a $5 fee, \\(x\\)"),                                           # \$ is a literal dollar
    ("`hidden_size**0.5` and `$x$`", "<code>hidden_size**0.5</code> and <code>$x$</code>"),  # code left alone
    ("``a`b`` done", "<code>a`b</code> done"),                                          # a longer fence
    ("an unclosed $x, and more", "an unclosed $x, and more"),
    ("a $ b$ c", "a $ b$ c"),                                                           # no opening $ here
    ("$a\n\nb$", "$a<br><br>b$"),                                                       # not across paragraphs
    ("the *output*, **not** $p*q$", "the <em>output</em>, <strong>not</strong> \\(p*q\\)"),
    ("<em>linear</em> unmixing", "<em>linear</em> unmixing"),                          # the drills' own emphasis
    ("<script>alert(1)</script> <em onclick=x>", "&lt;script&gt;alert(1)&lt;/script&gt; &lt;em onclick=x&gt;"),
    ("line one\nline two\n\nnext", "line one line two<br><br>next"),                   # wrapped lines, paragraphs
])
def test_markdown_becomes_an_anki_field(markdown, field):
    assert to_anki_html(markdown) == field


def test_a_tag_has_no_spaces_and_keeps_the_heading_recognisable():
    assert tag("5 · The experiment: train with $1/\\sqrt{d_k}$, no scaling") == \
        "5_the_experiment_train_with_1_sqrt_d_k_no_scaling"
    assert tag("3.1 The variance of a dot product grows like $d_k$") == "3.1_the_variance_of_a_dot_product_grows_like_d_k"
    assert tag("·") == "untitled"
