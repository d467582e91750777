"""``twistd webui`` options: what is required, the loopback default, number checks."""

from __future__ import annotations

import pytest
from twisted.python import usage

from webui.tap import DEFAULT_LISTEN, Options


def test_defaults_listen_on_loopback_read_only():
    options = Options()
    options.parseOptions(["--zk", "127.0.0.1:2181/chroot"])
    assert options["listen"] == DEFAULT_LISTEN == "tcp:8080:interface=127.0.0.1"
    assert not options["allow-admin-actions"]
    assert options["lag-sample-interval"] == 30.0


@pytest.mark.parametrize("argv", [[], ["--zk", "h:1", "--lag-sample-interval", "0"],
                                  ["--zk", "h:1", "--refresh", "soon"], ["--zk", "h:1", "--refresh", "-1"]])
def test_bad_options_are_refused(argv):
    with pytest.raises(usage.UsageError):
        Options().parseOptions(argv)


def test_admin_actions_are_opt_in():
    options = Options()
    options.parseOptions(["--zk", "h:1", "--allow-admin-actions", "--refresh", "0"])
    assert options["allow-admin-actions"] and options["refresh"] == 0
