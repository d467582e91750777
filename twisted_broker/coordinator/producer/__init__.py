"""Idempotent producers (KIP-98 without transactions): producer ids handed out in blocks
(producer_ids.py) and each partition leader's table of producers' last batches
(producer_state.py, pure)."""
