"""Tuning records: append-only JSON lines, safe against kill -9 and concurrent writers.
"""
