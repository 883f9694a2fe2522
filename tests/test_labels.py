"""labels.py on a hand-written byte-level BPE whose every id is known (tests/td_tokenizer.py):
boundary-stable paths, surface variants, collisions, strict prefixes, refusals. No model."""

from __future__ import annotations

import pytest
from td_tokenizer import char_id, hand_tokenizer, merged_id

from typed_decisions.errors import TokenizerBoundaryError
from typed_decisions.labels import build_label_paths, surface_variants

EOS = 2  # <|im_end|>
YES, NO = merged_id("yes"), merged_id("no")


@pytest.fixture(scope="module")
def tok():
    return hand_tokenizer()


def ids(text: str) -> tuple[int, ...]:
    """Character by character: the ids a string has when no merge applies to it."""
    return tuple(char_id("Ġ" if c == " " else c) for c in text)


@pytest.mark.parametrize(("text", "expected"), [
    ("billing", ["billing", "Billing"]), ("Yes", ["Yes", "yes"]), ("ABC", ["ABC", "abc"]),
    ("x", ["x", "X"]), ("42", ["42"]), ("", [""]),
])
def test_surface_variants(text, expected):
    assert surface_variants(text) == expected


def test_canonical_labels_first_then_variants(tok):
    lp = build_label_paths(tok, "\n", [surface_variants("yes"), surface_variants("no")], ["yes", "no"], [EOS])
    # "yes" and "no" are merged tokens; "Yes" and "No" have no merge: one id per character.
    assert lp.paths == ((YES,), (NO,), ids("Yes"), ids("No"))
    assert lp.owners == (0, 1, 0, 1) and lp.texts == ("yes", "no", "Yes", "No")


def test_leading_space_label_is_its_own_token(tok):
    lp = build_label_paths(tok, "Answer:", [[" yes"], [" no"]], ["yes", "no"], [EOS])
    assert lp.paths == ((merged_id("Ġyes"),), (char_id("Ġ"), NO))


def test_strict_prefix_gets_the_end_token(tok):
    lp = build_label_paths(tok, "\n", [["bug"], ["bug report"]], ["bug", "bug report"], [EOS])
    assert lp.paths == ((merged_id("bug"), EOS), (merged_id("bug"),) + ids(" report"))


def test_a_label_that_merges_with_the_tail_is_refused_by_name(tok):
    # "Answer:" + ":" tokenizes as "Answer" + "::": the label's ":" would be read off a merged token.
    with pytest.raises(TokenizerBoundaryError, match="option 'colon'.*':'") as e:
        build_label_paths(tok, "Answer:", [[":"], ["no"]], ["colon", "no"], [EOS], loc=("questions", "q"))
    assert e.value.loc == ("questions", "q")


def test_a_variant_that_merges_is_dropped_not_refused(tok):
    # The variant ":" of option 0 is unstable after "Answer:"; its canonical label " yes" is fine.
    lp = build_label_paths(tok, "Answer:", [[" yes", ":"], [" no"]], ["yes", "no"], [EOS])
    assert lp.texts == (" yes", " no") and lp.owners == (0, 1)


def test_two_options_with_the_same_tokens_are_refused(tok):
    with pytest.raises(TokenizerBoundaryError, match="'a' and 'b' have the same label tokens"):
        build_label_paths(tok, "\n", [["yes"], ["yes"]], ["a", "b"], [EOS])


def test_a_colliding_variant_is_dropped(tok):
    # Option 0's variant "yes" is option 1's canonical label: the variant goes, the label stays.
    lp = build_label_paths(tok, "\n", [surface_variants("Yes"), surface_variants("yes")], ["Yes", "yes"], [EOS])
    assert dict(zip(lp.texts, lp.owners)) == {"Yes": 0, "yes": 1}
    assert lp.paths == (ids("Yes"), (YES,))


def test_empty_tail(tok):
    lp = build_label_paths(tok, "", [["yes"], ["no"]], ["yes", "no"], [EOS])
    assert lp.paths == ((YES,), (NO,))
