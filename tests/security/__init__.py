"""Attacks on the embedded server from 127.0.0.1: bounded in time and count, against a real server."""
