"""Reading what the system wrote, and asserting on it: operation rows and their audit
trail, the provider's ledger, webhook deliveries."""
