"""format_table: columns padded to their widest cell, two spaces apart, no trailing blanks."""

from twisted_broker.tools.table import format_table


def test_columns_line_up_and_lines_do_not_end_in_blanks():
    assert format_table(("A", "LONG", "Z"), [("xyz", 1, "end"), ("q", 12345, "")]) == [
        "A    LONG   Z",
        "xyz  1      end",
        "q    12345",
    ]


def test_a_header_alone_and_a_single_column():
    assert format_table(("ONLY",), []) == ["ONLY"]
    assert format_table(("N",), [(10,)]) == ["N", "10"]
