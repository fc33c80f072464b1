"""Settlement reconciliation: our books against the provider's, every difference queued."""
