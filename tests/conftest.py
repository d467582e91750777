"""Fixtures shared by every test folder (none yet; markers are registered in setup.cfg)."""
