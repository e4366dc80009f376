"""Repro files: written when a property fails, read as untrusted input, replayed."""
