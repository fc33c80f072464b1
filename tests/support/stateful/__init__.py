"""The stateful protocol test's model: its world (owners, requests on the network, what
it reads back) and the calls it makes, each as the service makes it."""
