"""Handlers of the debug port's command lines and ZooKeeper's four-letter words."""
