"""Topic filters for wildcard consumers: Whitelist and Blacklist (0.7.1+'s ``TopicFilter``).

A filter is a regex that must match a topic name **whole** (Java's ``String.matches``). A
Whitelist allows the topics it matches, a Blacklist the topics it does not. Before compiling,
the raw text is normalized exactly as 0.7 does, because other consumers of the group rebuild
the filter from the registered text and must reach the same topics:

1. trim leading and trailing characters up to U+0020 (Java's ``String.trim``);
2. ``,`` becomes ``|`` (so ``a,b`` is the list "a or b") and spaces are removed;
3. leading and trailing quotes (``"`` or ``'``) are removed, as properties files may carry them.

The normalized text is what goes into ZooKeeper: ``*<streams>*<regex>`` or
``!<streams>!<regex>`` (registry/paths.py). Regexes use Python's ``re`` syntax, which agrees
with Java's for the usual topic patterns (``.``, ``*``, classes, ``|``, groups, and on Python
3.11+ possessive quantifiers and atomic groups); Java-only constructs such as ``\\p{Alpha}``,
``\\Q...\\E`` or ``(?<name>...)`` do not compile, and a filter made from one raises ValueError
naming its regex. (Java's class intersection ``[a-z&&[^b]]`` compiles, with another meaning:
Python only warns.) Another member's registered filter that does not compile here is not an
error of ours: the rebalance counts it as subscribing to nothing (client/group_assignment.py).
"""

from __future__ import annotations

import re

from twisted_broker.registry.paths import WildcardSubscription

# re's messages for escapes and group syntax that Java has and Python lacks.
_JAVA_ONLY_ERRORS = ("bad escape", "unknown extension")
_JAVA_HINT = (" (topic filters use Python's re syntax, which has no \\p{...} classes, \\Q...\\E quoting "
              "or (?<name>...) groups)")
_LEADING_QUOTES = re.compile("^[\"']+")
_TRAILING_QUOTES = re.compile("[\"']+$")


def normalize(raw_regex: str) -> str:
    """0.7's TopicFilter normalization of a filter's text (see the module docstring)."""
    regex = _java_trim(raw_regex).replace(",", "|").replace(" ", "")
    return _TRAILING_QUOTES.sub("", _LEADING_QUOTES.sub("", regex))


def _java_trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


class TopicFilter:
    """A normalized topic regex; subclasses say whether a match allows or excludes a topic.

    Immutable and thread-safe. Raises ValueError for a regex that does not compile (0.7:
    RuntimeException "... is an invalid regex.").
    """

    whitelist: bool

    def __init__(self, raw_regex: str) -> None:
        self.regex = normalize(raw_regex)
        try:
            self._pattern = re.compile(self.regex)
        except re.error as exc:
            # 0.7's message first ("<regex> is an invalid regex."), then why, and a hint for
            # the usual cause: a pattern written for Java.
            hint = _JAVA_HINT if exc.msg.startswith(_JAVA_ONLY_ERRORS) else ""
            raise ValueError(f"{self.regex} is an invalid regex: {exc}{hint}") from None

    def matches(self, topic: str) -> bool:
        """True if the regex matches the whole topic name."""
        return self._pattern.fullmatch(topic) is not None

    def is_topic_allowed(self, topic: str) -> bool:
        raise NotImplementedError

    def subscription(self, streams: int) -> WildcardSubscription:
        """This filter's registration with ``streams`` streams (``*n*regex`` / ``!n!regex``)."""
        return WildcardSubscription(self.whitelist, streams, self.regex)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.regex == self.regex

    def __hash__(self) -> int:
        return hash((type(self), self.regex))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"

    def __str__(self) -> str:
        return self.regex


class Whitelist(TopicFilter):
    """Allows the topics the regex matches whole: ``Whitelist("logs-.*,audit")``."""

    whitelist = True

    def is_topic_allowed(self, topic: str) -> bool:
        return self.matches(topic)


class Blacklist(TopicFilter):
    """Allows the topics the regex does **not** match whole: ``Blacklist("internal-.*")``."""

    whitelist = False

    def is_topic_allowed(self, topic: str) -> bool:
        return not self.matches(topic)


def topic_filter_for(subscription: WildcardSubscription) -> TopicFilter:
    """The filter another consumer registered (to expand its streams over the topics).

    Raises ValueError if its regex does not compile here.
    """
    return (Whitelist if subscription.whitelist else Blacklist)(subscription.regex)
