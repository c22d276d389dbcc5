"""The result of tuning: the plan file and its decision tree over the dynamic dims.
"""
