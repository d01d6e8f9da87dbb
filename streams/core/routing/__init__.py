"""Routing: canonical key bytes and hashes, the placement registry, routing maps and the router, split keys."""
