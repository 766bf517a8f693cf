"""The SSH test-cluster harness (cluster.py) and its pytest fixture (fixtures.py)."""
