"""The broker's tests: commands over RabbitMQ (`payments consume`)."""
