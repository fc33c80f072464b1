"""RabbitMQ: commands in (`payments consume`) and events out (the worker), beside HTTP.

A command is an AMQP message shaped like the HTTP request it stands for (docs/broker.md):
its `type` names the operation, its headers carry what HTTP carries in headers and in the
path (the tenant's API key, the `Idempotency-Key`, the payment a refund is for), its body is
the request's JSON body. It goes through the same validation and the same keyed flow as the
HTTP request, so one key is one payment whichever way each copy of it came.

    topology.py     the quorum queue, its dead-letter exchange and queue
    commands.py     reading a message's envelope into a `Command`, or refusing it
    kinds.py        the command types: which operation, and how its body becomes its command
    handler.py      one command's answer: the tenant, the validation, the keyed flow
    replies.py      the answer as a reply message (the HTTP body, the status in a header)
    dead_letters.py a refused command as a dead letter, with its reason
    metrics.py      what became of each delivery, counted; what the consumer serves
    consumer.py     the process: deliveries, acks, requeues, dead letters, the stop

The worker publishes every event of the outbox to a topic exchange, marked published only
once the broker confirmed it (the events' own cursors: `app/events/publication.py`):

    exchange.py     the exchange's declaration, and an event as a message
    publisher.py    one confirmed connection and channel, and what a batch got confirmed
    events.py       the worker's job: each tenant's new events, claimed, published, recorded

Nothing here starts unless `PAYMENTS_BROKER_URL` is set; HTTP stays the default.
"""
