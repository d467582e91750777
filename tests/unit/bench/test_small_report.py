"""bench/small_report.py: the section of latest.md is replaced in place, or appended."""

from bench.small_report import SMALL_HEADING, replace_section, section_of

PAPER = "Measured today.\n\n| a | b |\n|---|---|\n"
NEW = f"{SMALL_HEADING}\n\nnew figures\n"


def test_a_missing_section_is_appended_after_a_blank_line():
    assert replace_section(PAPER, SMALL_HEADING, NEW) == PAPER + "\n" + NEW


def test_an_empty_file_gets_the_section_alone():
    assert replace_section("", SMALL_HEADING, NEW) == NEW


def test_the_section_is_replaced_and_what_follows_it_kept():
    text = PAPER + "\n" + f"{SMALL_HEADING}\n\nold figures\n\n## Another\n\nkept\n"
    assert replace_section(text, SMALL_HEADING, NEW) == PAPER + "\n" + NEW + "\n## Another\n\nkept\n"


def test_replacing_twice_gives_the_same_text():
    once = replace_section(PAPER, SMALL_HEADING, NEW)
    assert replace_section(once, SMALL_HEADING, NEW) == once


def test_section_of_reads_back_what_was_written():
    assert section_of(replace_section(PAPER, SMALL_HEADING, NEW), SMALL_HEADING) == NEW
    assert section_of(PAPER, SMALL_HEADING) == ""
