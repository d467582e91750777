"""Benchmarks of twisted_broker (``make bench``): each prints figures beside a baseline measured in the same run."""
