"""Attacks on the embedded server, as an outsider on the same network would send them."""
