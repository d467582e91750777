"""Which topic names a broker accepts (0.7.2 ``TopicNameValidator``, plus a path check).

A topic name becomes a directory name under ``log.dir``, so besides 0.7.2's rules we refuse
anything that could leave that directory or that the filesystem cannot hold.
"""

from __future__ import annotations

import re

from twisted_broker.errors import InvalidTopic

MAX_TOPIC_NAME_LENGTH = 255
NAME_MAX_BYTES = 255  # Linux NAME_MAX for the "<topic>-<partition>" directory

# 0.7.2's illegal ranges: C0 and C1 controls, DEL, surrogates and private use, specials.
_ILLEGAL = re.compile("[/\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


def check_topic_name(topic: str, max_length: int = MAX_TOPIC_NAME_LENGTH) -> str:
    """Return ``topic`` if a broker may hold it; raise InvalidTopic saying why not."""
    if not topic:
        raise InvalidTopic("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopic(f"topic name {topic!r} is not allowed")
    if len(topic) > max_length:
        raise InvalidTopic(f"topic name is {len(topic)} characters, over the limit of {max_length}")
    bad = _ILLEGAL.search(topic)
    if bad:
        raise InvalidTopic(f"topic name {topic!r} contains the illegal character {bad.group()!r}")
    # "-" + the largest partition number must still fit in one directory name.
    if len(topic.encode("utf-8")) + len("-2147483647") > NAME_MAX_BYTES:
        raise InvalidTopic(f"topic name {topic!r} is too long for a directory name")
    return topic
