"""Who may do what: Kafka's ACL model and the authorizer that applies it (pure: no I/O)."""
