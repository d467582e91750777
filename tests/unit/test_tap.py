"""The twistd plugin's composition root: what it does beyond wiring the parts."""

import gc
import weakref

import pytest
from twisted.python import usage

from twisted_broker.tap import debug_password, freeze_startup_objects


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_freeze_startup_objects_hides_what_exists_from_the_collector_but_not_its_garbage():
    garbage = Cycle()
    garbage_ref = weakref.ref(garbage)
    del garbage  # unreachable but for its own cycle: only the cyclic collector frees it
    kept = Cycle()
    gc.unfreeze()
    try:
        freeze_startup_objects()
        assert garbage_ref() is None  # collected, not frozen
        assert not any(obj is kept for obj in gc.get_objects())  # frozen: in no generation
    finally:
        gc.unfreeze()
    assert any(obj is kept for obj in gc.get_objects())


# -- the debug port's exposure (docs/security.md, "The debug port") ----------------------------

def test_a_debug_port_beyond_loopback_without_protection_is_refused_saying_why():
    with pytest.raises(usage.UsageError, match="reachable beyond loopback.*--debug-password-file"):
        debug_password("tcp:9093:interface=0.0.0.0", None)


def test_a_debug_port_beyond_loopback_with_a_password_or_client_certificates_is_allowed(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("hunter2\nignored\n")
    assert debug_password("tcp:9093:interface=0.0.0.0", str(secret)) == b"hunter2"
    assert debug_password("ssl:9093:privateKey=k.pem:caCertsDir=ca", None) is None
    assert debug_password("tcp:9093:interface=127.0.0.1", None) is None  # loopback: as before
    secret.write_text("\n")
    with pytest.raises(usage.UsageError, match="holds no password"):
        debug_password("tcp:9093:interface=127.0.0.1", str(secret))
