"""PyTorch adapter: extract a training graph, profile it, execute plans.

Under construction (issue 5); nothing here is public yet.
"""
