"""Commands and events over a RabbitMQ broker."""
