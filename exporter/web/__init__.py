"""The web side: the HTTP server, its routes, the status page and its charts, TLS and auth."""
