"""The command line's shape: --help, --version, and one-line errors with status 2."""

import pytest

from twisted_broker import __version__
from twisted_broker.cli import main


def test_help_exits_0_and_names_the_program(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.startswith("usage: twisted-broker")


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"twisted-broker {__version__}\n"


@pytest.mark.parametrize("argv", [["no-such-command"], [], ["--no-such-option"]])
def test_bad_command_line_is_one_line_error_with_status_2(capsys, argv):
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("twisted-broker: error: ")
    assert err.count("\n") == 1
