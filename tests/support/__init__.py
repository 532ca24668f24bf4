"""What the tests share: environments (a NATS server, a cluster, a Docker engine), contract
test classes run against each adapter and its fake, and builders of test data."""
