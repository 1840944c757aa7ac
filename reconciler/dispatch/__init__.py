"""The dispatcher process: the leader's watches and what it adds to the work queue."""
