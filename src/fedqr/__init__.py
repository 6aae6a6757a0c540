"""fedqr: federated learning with client-side differential privacy (FedSGD-DPC).

Plans the number of queries T and replies per round b under per-client privacy
budgets, and simulates the resulting training fast (batched clients and repeats).
"""

__version__ = "0.1.0"
