"""The shape-generic search and the budget split over a model's workloads."""
