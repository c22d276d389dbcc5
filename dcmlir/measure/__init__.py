"""Measuring: the timing rules, what can be timed (one family of variants), the supervised
worker process that applies the rules (the one timing path), and the measuring loop (build
what the records lack, time it, append every result).
"""
