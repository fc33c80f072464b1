"""Payment and refund commands over RabbitMQ, answered exactly once."""
