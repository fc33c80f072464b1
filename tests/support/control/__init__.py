"""Process control: starting, steering and stopping the real processes tests run against
(API, worker, fake provider, webhook receivers, PostgreSQL), and waiting on them."""
