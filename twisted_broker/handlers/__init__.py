"""Request handlers, one package per protocol: decoded requests in, response pieces out."""
