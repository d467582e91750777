"""Codecs of the wire protocols: pure, no I/O (docs/architecture.md)."""
