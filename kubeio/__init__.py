"""The Kubernetes access layer: configuration, the sync and async clients, the one
resource-path table and the one retry policy. No operator logic."""
