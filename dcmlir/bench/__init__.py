"""Benchmarks: a tuned workload or model against every baseline a user could pick.
"""
