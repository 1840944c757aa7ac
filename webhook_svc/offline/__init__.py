"""The offline command-line tools: ``icache admit-pod`` and ``icache validate`` judge
manifest files as the webhook would, with no cluster and no server."""
