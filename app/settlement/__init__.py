"""Settlement: our books against the provider's, every discrepancy queued."""
