"""Twisted edges: protocols that turn bytes from sockets into calls on the broker, and back."""
