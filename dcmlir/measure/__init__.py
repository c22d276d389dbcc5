"""Measuring: the timing rules, the supervised worker process that applies them, and the
measuring loop (build what the records lack, time it, append every result).
"""
