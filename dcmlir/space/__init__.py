"""The micro-kernel space: candidates derived from a target's limits only.
"""
