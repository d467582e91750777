"""Whitelist and Blacklist with Kafka 0.7's semantics (TopicFilter.scala), and their registrations."""

import pytest

from twisted_broker.client.topic_filter import Blacklist, Whitelist, normalize, topic_filter_for
from twisted_broker.registry import paths
from twisted_broker.registry.paths import WildcardSubscription


def test_whitelist_allows_only_topics_the_regex_matches_whole():
    whitelist = Whitelist("logs-.*")
    assert whitelist.is_topic_allowed("logs-web")
    assert whitelist.is_topic_allowed("logs-")
    assert not whitelist.is_topic_allowed("applogs-web")   # no search: a whole match
    assert not whitelist.is_topic_allowed("log")


def test_whitelist_of_a_plain_name_does_not_allow_longer_names():
    assert Whitelist("test").is_topic_allowed("test")
    assert not Whitelist("test").is_topic_allowed("test2")
    assert not Whitelist("test").is_topic_allowed("mytest")


def test_commas_become_alternatives():
    whitelist = Whitelist("a,b")
    assert whitelist.regex == "a|b"
    assert [t for t in ["a", "b", "ab", "c"] if whitelist.is_topic_allowed(t)] == ["a", "b"]


def test_alternation_matches_whole_names_as_java_matches():
    assert Whitelist("a|ab").is_topic_allowed("ab")


def test_blacklist_allows_topics_the_regex_does_not_match_whole():
    blacklist = Blacklist("internal-.*,tmp")
    assert blacklist.is_topic_allowed("orders")
    assert blacklist.is_topic_allowed("tmp2")
    assert not blacklist.is_topic_allowed("internal-x")
    assert not blacklist.is_topic_allowed("tmp")


@pytest.mark.parametrize("raw, regex", [
    ("  a, b  ", "a|b"),           # trimmed, spaces dropped
    ('"a,b"', "a|b"),              # quotes from a properties file
    ("'a.*'", "a.*"),
    ("\"'a'\"", "a"),
    ("\t\x01a\n", "a"),            # Java's trim: every char up to U+0020
    ("a b c", "abc"),
    ("x\"y", "x\"y"),              # an inner quote stays
])
def test_normalization_is_0_7s(raw, regex):
    assert normalize(raw) == regex
    assert Whitelist(raw).regex == regex


def test_invalid_regex_raises_value_error():
    with pytest.raises(ValueError, match="invalid regex"):
        Whitelist("a(")


@pytest.mark.parametrize("regex", ["\\p{Alpha}+", "\\Qa.b\\E", "(?<name>logs)-.*"])
@pytest.mark.parametrize("kind", [Whitelist, Blacklist])
def test_a_java_only_construct_is_a_value_error_naming_the_regex_and_python_syntax(kind, regex):
    with pytest.raises(ValueError) as refused:
        kind(regex)
    message = str(refused.value)
    assert message.startswith(f"{regex} is an invalid regex: "), message  # 0.7's words first
    assert "Python's re syntax" in message


def test_a_plain_syntax_error_gets_no_java_hint():
    with pytest.raises(ValueError) as refused:
        Whitelist("a(")
    assert "Java" not in str(refused.value) and "Python" not in str(refused.value)


def test_possessive_quantifiers_and_atomic_groups_compile_as_in_java():
    assert Whitelist("logs-[a-z]*+").is_topic_allowed("logs-web")
    assert not Whitelist("a*+a").is_topic_allowed("aaa")  # possessive: gives nothing back
    assert Whitelist("(?>ab|a)c").is_topic_allowed("abc")


def test_a_registered_filter_that_does_not_compile_here_is_a_value_error():
    with pytest.raises(ValueError, match="invalid regex"):
        topic_filter_for(paths.decode_subscription(b"*1*\\p{Alpha}+"))


def test_registration_values():
    assert Whitelist("logs-.*").subscription(2).encode() == b"*2*logs-.*"
    assert Blacklist("tmp, internal").subscription(1).encode() == b"!1!tmp|internal"


@pytest.mark.parametrize("topic_filter", [Whitelist("a.*,b"), Blacklist("x|y.+")])
def test_a_registered_filter_is_rebuilt_equal_by_other_consumers(topic_filter):
    decoded = paths.decode_subscription(topic_filter.subscription(3).encode())
    assert decoded == WildcardSubscription(topic_filter.whitelist, 3, topic_filter.regex)
    assert topic_filter_for(decoded) == topic_filter


def test_whitelist_and_blacklist_of_one_regex_differ():
    assert Whitelist("a") != Blacklist("a")
    assert Whitelist("a,b") == Whitelist("a|b")
