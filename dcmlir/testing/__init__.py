"""Fakes shipped with the library, for tests and for trying new strategies without IREE.
"""
