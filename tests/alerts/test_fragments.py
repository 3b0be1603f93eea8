"""mirrorwatch.alerts.fragments: «name» is the only thing replaced in rule text."""

from __future__ import annotations

import pytest

from mirrorwatch.alerts.fragments import FragmentError, fill, num, percent


def test_go_templates_and_promql_braces_pass_through_untouched() -> None:
    text = 'x{reason="thermal"} > «limit» {{ $labels.gpu }} {{ with printf `a{b=%q}` }}'
    assert fill(text, {"limit": 0.5}) == (
        'x{reason="thermal"} > 0.5 {{ $labels.gpu }} {{ with printf `a{b=%q}` }}'
    )


def test_a_ratio_can_be_written_as_a_percentage() -> None:
    assert fill("above «limit:%»", {"limit": 0.05}) == "above 5%"


def test_a_list_of_numbers_becomes_a_regex_alternation() -> None:
    assert fill('xid=~"«xids»"', {"xids": (48, 79)}) == 'xid=~"48|79"'


def test_fragments_may_name_fragments() -> None:
    assert fill("«outer»", {"outer": "a > «inner»", "inner": 3}) == "a > 3"


def test_a_multi_line_fragment_keeps_the_indentation_of_its_line() -> None:
    assert fill("(\n  «inner»\n)", {"inner": "a\nor\nb"}) == "(\n  a\n  or\n  b\n)"


def test_an_unknown_fragment_is_an_error() -> None:
    with pytest.raises(FragmentError, match="«missing»"):
        fill("x > «missing»", {})


@pytest.mark.parametrize("text", ["x > «", "x » y", "«not a name»"])
def test_a_stray_guillemet_is_an_error(text: str) -> None:
    with pytest.raises(FragmentError):
        fill(text, {})


def test_a_fragment_that_names_itself_is_an_error() -> None:
    with pytest.raises(FragmentError, match="nested"):
        fill("«loop»", {"loop": "«loop»"})


def test_numbers_read_as_people_write_them() -> None:
    assert [num(5.0), num(0.05), num(120)] == ["5", "0.05", "120"]
    assert percent(0.95) == "95%"
