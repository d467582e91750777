"""The twistd plugin's composition root: what it does beyond wiring the parts."""

import gc
import weakref

from twisted_broker.tap import freeze_startup_objects


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
